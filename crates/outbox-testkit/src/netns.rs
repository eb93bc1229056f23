//! A network namespace joined to this one by a veth pair: a process run in
//! it reaches this side only over that link, and taking this side's end
//! down is a partition the kernel makes. Packets are dropped, nothing is
//! reset: the process's sockets stay open, its retransmissions and
//! keepalives go unanswered, its new connections time out. Needs root and
//! `ip` (iproute2); deleted with everything in it on drop.

use std::net::Ipv4Addr;
use std::process::Command;

/// A namespace and its link.
#[derive(Debug)]
pub struct Netns {
    name: String,
    /// This side's end of the veth pair.
    host_if: String,
    /// This side's address on the link: what a process in the namespace connects to.
    pub host_addr: Ipv4Addr,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    /// A new namespace with the link up, or why none can be made here.
    pub fn create() -> Result<Self, String> {
        // Unique per process and call; a /30 of 10.213.0.0/16 from them.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = std::process::id().wrapping_mul(7)
            + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let slot = n % 16_000;
        let name = format!("obx_t{n}");
        let host_if = format!("obx{slot}h");
        let ns_if = format!("obx{slot}n");
        let base = 4 * slot;
        let addr =
            |k: u32| Ipv4Addr::new(10, 213, ((base + k) >> 8) as u8, ((base + k) & 0xff) as u8);
        let (host_addr, ns_addr) = (addr(1), addr(2));
        ip(&["netns", "add", &name])?;
        let me = Self {
            name,
            host_if,
            host_addr,
        };
        let host = format!("{host_addr}/30");
        let ns = format!("{ns_addr}/30");
        ip(&[
            "link",
            "add",
            &me.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &ns_if,
        ])?;
        ip(&["link", "set", &ns_if, "netns", &me.name])?;
        ip(&["addr", "add", &host, "dev", &me.host_if])?;
        ip(&["link", "set", &me.host_if, "up"])?;
        ip(&["-n", &me.name, "addr", "add", &ns, "dev", &ns_if])?;
        ip(&["-n", &me.name, "link", "set", &ns_if, "up"])?;
        ip(&["-n", &me.name, "link", "set", "lo", "up"])?;
        Ok(me)
    }

    /// `program` to be run inside the namespace (`ip netns exec` execs it,
    /// so the child's pid is the program's).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Takes this side's end down: from inside, the link has no carrier
    /// and every packet is dropped.
    pub fn partition(&self) {
        ip(&["link", "set", &self.host_if, "down"]).expect("partition");
    }

    /// Brings it up again.
    pub fn heal(&self) {
        ip(&["link", "set", &self.host_if, "up"]).expect("heal");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The veth pair goes with the namespace that holds one end.
        let _ = ip(&["netns", "del", &self.name]);
    }
}
