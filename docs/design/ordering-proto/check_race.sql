SELECT (SELECT count(*) FROM outbox.messages) AS left_in_hot,
       (SELECT count(*) FROM outbox.messages_sent) AS sent,
       (SELECT count(*) FROM (
          SELECT id, locked_by, locked_at, sent_at,
                 lag(id) OVER w AS pid, lag(locked_by) OVER w AS pby, lag(locked_at) OVER w AS pat, lag(sent_at) OVER w AS psent
            FROM outbox.messages_sent WINDOW w AS (PARTITION BY aggregate_type, aggregate_id ORDER BY id)) x
         WHERE pid IS NOT NULL
           AND NOT ((locked_by, locked_at) = (pby, pat) OR locked_at >= psent)) AS order_violations,
       (SELECT count(*) FROM outbox.messages_sent WHERE attempts > 1) AS retried;
