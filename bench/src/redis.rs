//! The Redis server that the `redis` scheme is measured against: a private
//! `redis-server` that each run starts ([`testkit::Redis`]: no persistence,
//! killed with the run), reached over loopback TCP by default, as a client
//! on another host reaches its server, or through its unix socket; and a
//! bare client of it, for the floors (the fewest round trips a lock on a
//! server can take).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// What the `redis` specs of a run ask for beyond the server and the name:
/// a lease, as every lock shared across hosts needs (a holder that vanishes
/// is freed only by its key's expiry), long enough that no benchmark's
/// holder runs past it.
pub const QUERY: &str = "ttl=30s";

/// Why a run has no server, for its output.
pub const MISSING: &str = "redis-server is not installed (Debian: apt-get install redis-server)";

/// How clients reach the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Loopback TCP: what a client on another host uses, less the network.
    Tcp,
    /// The server's unix socket: clients on its own host only.
    Unix,
}

impl Transport {
    pub const ALL: [Transport; 2] = [Transport::Tcp, Transport::Unix];

    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Unix => "unix",
        }
    }

    pub fn from_name(name: &str) -> Option<Transport> {
        Transport::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// A `redis-server` of this run's.
pub struct RedisServer {
    server: testkit::Redis,
    transport: Transport,
}

impl RedisServer {
    /// Starts one, its clients to come by `transport`; `Err` with why when
    /// `redis-server` is not installed. Under CI (`CI` set) its absence
    /// panics instead: CI installs it, and a run that skipped the redis
    /// cells must not pass for one that ran them.
    pub fn start(transport: Transport) -> Result<RedisServer, String> {
        if !testkit::redis_available() {
            return Err(MISSING.into());
        }
        Ok(RedisServer { server: testkit::Redis::start(&[]), transport })
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }

    pub fn socket(&self) -> PathBuf {
        self.server.socket()
    }

    /// The spec of the lock `name` (with `query`, possibly empty), reached
    /// by this run's transport.
    pub fn spec(&self, name: &str, query: &str) -> String {
        self.spec_via(self.transport, name, query)
    }

    pub fn spec_via(&self, transport: Transport, name: &str, query: &str) -> String {
        match transport {
            Transport::Tcp => self.server.tcp_spec(name, query),
            Transport::Unix => self.server.spec(name, query),
        }
    }

    /// Where the clients connect, as a reader of the output wants it.
    pub fn address(&self) -> String {
        match self.transport {
            Transport::Tcp => format!("127.0.0.1:{}", self.port()),
            Transport::Unix => self.socket().display().to_string(),
        }
    }

    /// `7.0.15`, as the server says (`INFO server`).
    pub fn version(&self) -> String {
        info_field(&self.server.command(&["INFO", "server"]), "redis_version").unwrap_or_else(|| "?".into())
    }

    /// One line on the server and how it is reached.
    pub fn describe(&self) -> String {
        let how = match self.transport {
            Transport::Tcp => "over loopback TCP",
            Transport::Unix => "through its unix socket",
        };
        format!("redis-server {} {how} ({})", self.version(), self.address())
    }

    /// The server's own CPU time so far (user + system, all its threads),
    /// from `INFO cpu`, in nanoseconds: microsecond resolution, where
    /// `/proc` counts in ticks of 10 ms.
    pub fn cpu_ns(&self) -> Option<u64> {
        let info = self.server.try_command(&["INFO", "cpu"])?;
        let seconds = |field| info_field(&info, field)?.parse::<f64>().ok();
        Some(((seconds("used_cpu_user")? + seconds("used_cpu_sys")?) * 1e9) as u64)
    }

    /// A bare client, by this run's transport.
    pub fn connect(&self) -> std::io::Result<RawClient> {
        self.connect_via(self.transport)
    }

    pub fn connect_via(&self, transport: Transport) -> std::io::Result<RawClient> {
        let stream = match transport {
            Transport::Tcp => {
                let tcp = TcpStream::connect(("127.0.0.1", self.port()))?;
                // As lockcore's own connection: a request is one small
                // write, which must not wait for the last one's ACK.
                tcp.set_nodelay(true)?;
                Stream::Tcp(tcp)
            }
            Transport::Unix => Stream::Unix(UnixStream::connect(self.socket())?),
        };
        stream.set_timeout(Duration::from_secs(10))?;
        Ok(RawClient { stream, buf: Vec::with_capacity(64) })
    }

    /// `redis-benchmark` arguments that reach this server by its transport.
    pub fn benchmark_target(&self) -> Vec<String> {
        match self.transport {
            Transport::Tcp => vec!["-h".into(), "127.0.0.1".into(), "-p".into(), self.port().to_string()],
            Transport::Unix => vec!["-s".into(), self.socket().display().to_string()],
        }
    }
}

/// `field:value` of an `INFO` answer.
fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|line| line.trim().strip_prefix(field)?.strip_prefix(':').map(str::to_owned))
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn set_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(Some(timeout)).and_then(|()| s.set_write_timeout(Some(timeout))),
            Stream::Unix(s) => s.set_read_timeout(Some(timeout)).and_then(|()| s.set_write_timeout(Some(timeout))),
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes),
            Stream::Unix(s) => s.write_all(bytes),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

/// A connection that sends ready-made commands and reads one-line answers
/// (`+OK`, `:1`, `$-1`, `-ERR ...`): no more than the floors need, and no
/// allocation per request.
pub struct RawClient {
    stream: Stream,
    buf: Vec<u8>,
}

impl RawClient {
    /// Sends `command` (already in RESP) and returns the first line of the
    /// answer, without its CRLF.
    pub fn request(&mut self, command: &[u8]) -> std::io::Result<&[u8]> {
        self.stream.write_all(command)?;
        self.buf.clear();
        let mut chunk = [0u8; 256];
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                return Ok(&self.buf[..end]);
            }
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// `args` as one RESP command.
pub fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    out
}

/// The floor of a lock on a server: `SET key token NX PX 30000` to take it,
/// `DEL key` to give it back, two round trips on one connection, without
/// the fence, queue and owner checks of a real lock. The cycle returns
/// false if either answer was not the one a free key gets.
pub fn set_nx_del_cycle(mut client: RawClient, key: &str) -> impl FnMut() -> bool {
    let set = command(&["SET", key, "token", "NX", "PX", "30000"]);
    let del = command(&["DEL", key]);
    move || {
        let taken = client.request(&set).is_ok_and(|answer| answer == b"+OK");
        taken && client.request(&del).is_ok_and(|answer| answer == b":1")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_info_fields() {
        assert_eq!(command(&["DEL", "k"]), b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n");
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:0\r\n";
        assert_eq!(info_field(info, "redis_version").as_deref(), Some("7.0.15"));
        assert_eq!(info_field(info, "redis_git"), None);
        assert_eq!(Transport::from_name("unix"), Some(Transport::Unix));
        assert_eq!(Transport::from_name("udp"), None);
    }
}
