//! asynq's `TaskMessage` (its `internal/proto/asynq.proto`), with the same
//! field numbers, so asynq's `DecodeMessage` reads what we write.

use std::collections::HashMap;

/// A task as asynq stores it in the `msg` field of the task hash.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskMessage {
    /// The task type a `ServeMux` routes on.
    #[prost(string, tag = "1")]
    pub r#type: String,
    /// The task payload (here: the envelope's native JSON).
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
    /// The task id (`outbox:<message id>`).
    #[prost(string, tag = "3")]
    pub id: String,
    /// The queue.
    #[prost(string, tag = "4")]
    pub queue: String,
    /// Maximum retries.
    #[prost(int32, tag = "5")]
    pub retry: i32,
    /// Retries so far.
    #[prost(int32, tag = "6")]
    pub retried: i32,
    /// Last error.
    #[prost(string, tag = "7")]
    pub error_msg: String,
    /// Timeout in seconds (0: none).
    #[prost(int64, tag = "8")]
    pub timeout: i64,
    /// Deadline in Unix seconds (0: none).
    #[prost(int64, tag = "9")]
    pub deadline: i64,
    /// Uniqueness lock key (empty: none).
    #[prost(string, tag = "10")]
    pub unique_key: String,
    /// Last failure in Unix seconds.
    #[prost(int64, tag = "11")]
    pub last_failed_at: i64,
    /// Seconds to keep the task once completed.
    #[prost(int64, tag = "12")]
    pub retention: i64,
    /// Completion time in Unix seconds.
    #[prost(int64, tag = "13")]
    pub completed_at: i64,
    /// Aggregation group (empty: none).
    #[prost(string, tag = "14")]
    pub group_key: String,
    /// Headers (asynq 0.25+; older workers skip the field).
    #[prost(map = "string, string", tag = "15")]
    pub headers: HashMap<String, String>,
}

impl TaskMessage {
    /// The protobuf bytes asynq stores.
    pub fn encode(&self) -> Vec<u8> {
        prost::Message::encode_to_vec(self)
    }

    /// Decodes what asynq stores (for tests and tools).
    pub fn decode(bytes: &[u8]) -> Result<Self, prost::DecodeError> {
        <Self as prost::Message>::decode(bytes)
    }
}
