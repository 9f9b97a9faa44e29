//! Servers the workspace's tests start and stop themselves: no test
//! depends on a server of the machine's, and none outlives its test
//! process.
//!
//! A [`Redis`] is a real `redis-server` (Debian's `redis-server` package),
//! listening on a unix socket in a directory of its own and on a free
//! loopback port, without persistence unless a test asks for it. A test
//! that kills, stops or reconfigures its server starts its own; the
//! others share one per test process ([`shared_redis`]), each on keys of
//! its own.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Whether `redis-server` can be run here. Under CI (`CI` set) its absence
/// fails the caller instead: CI installs it.
pub fn redis_available() -> bool {
    let found = Command::new("redis-server").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    let found = found.is_ok_and(|status| status.success());
    assert!(found || std::env::var_os("CI").is_none(), "CI must install redis-server");
    found
}

/// The server every test of this process shares, started by the first
/// that asks; `None` (with a line saying the test is skipped) where no
/// `redis-server` can run.
pub fn shared_redis() -> Option<&'static Redis> {
    static SHARED: OnceLock<Option<Redis>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            if !redis_available() {
                eprintln!("skipped: redis-server is not installed (Debian: apt-get install redis-server)");
                return None;
            }
            // Started from a thread that lives as long as the process: the
            // server's parent-death signal follows the thread that forked it.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                tx.send(Redis::start(&[])).expect("the test waits for its server");
                loop {
                    std::thread::park();
                }
            });
            Some(rx.recv().expect("the server thread answers"))
        })
        .as_ref()
}

/// A `redis-server` of a test's own.
pub struct Redis {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    extra: Vec<String>,
}

impl Redis {
    /// Starts a server with the configuration directives `extra` (such as
    /// `["--requirepass", "s3cret"]`) and waits until it answers.
    pub fn start(extra: &[&str]) -> Redis {
        let dir = unique_dir("redis");
        let mut redis =
            Redis { dir, port: free_port(), child: None, extra: extra.iter().map(|s| s.to_string()).collect() };
        redis.launch();
        redis
    }

    fn launch(&mut self) {
        let parent = std::process::id() as i32;
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--unixsocket")
            .arg(self.socket())
            .args(["--unixsocketperm", "777", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--enable-debug-command", "local", "--daemonize", "no", "--loglevel", "warning"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                // The server dies with the test, even a test that aborts.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        self.child = Some(command.spawn().unwrap_or_else(|e| panic!("start redis-server: {e}")));
        // Any answer will do: a server loading its data answers LOADING,
        // which the tests of that state want to see.
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.try_command(&["PING"]).is_none() {
            assert!(Instant::now() < deadline, "redis-server on {} never answered", self.socket().display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Its unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    /// Its loopback TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |child| child.id() as i32)
    }

    /// A `redis:` spec for the lock `name` on this server, through its unix
    /// socket, with `query` (may be empty).
    pub fn spec(&self, name: &str, query: &str) -> String {
        let socket = percent_encode(self.socket().to_str().expect("test paths are UTF-8"));
        with_query(format!("redis://{socket}/{}", percent_encode(name)), query)
    }

    /// The same, through its TCP port.
    pub fn tcp_spec(&self, name: &str, query: &str) -> String {
        with_query(format!("redis://127.0.0.1:{}/{}", self.port, percent_encode(name)), query)
    }

    /// Runs one command and returns its answer as `redis-cli` prints it
    /// (`--no-raw` off: one line per item); panics if the server cannot be
    /// reached.
    pub fn command(&self, args: &[&str]) -> String {
        self.try_command(args).unwrap_or_else(|| panic!("redis {args:?} got no answer"))
    }

    /// [`command`](Self::command), `None` when the server does not answer
    /// within two seconds.
    pub fn try_command(&self, args: &[&str]) -> Option<String> {
        self.try_commands(&[args]).map(|mut answers| answers.pop().unwrap_or_default())
    }

    /// Runs `args` in database `db`, logged in with `password` if it is
    /// given, and returns its answer.
    pub fn command_as(&self, password: Option<&str>, db: u32, args: &[&str]) -> String {
        let db = db.to_string();
        let mut commands: Vec<&[&str]> = Vec::new();
        let auth;
        if let Some(password) = password {
            auth = ["AUTH", password];
            commands.push(&auth);
        }
        let select = ["SELECT", db.as_str()];
        commands.push(&select);
        commands.push(args);
        let answers = self.try_commands(&commands);
        answers.and_then(|mut answers| answers.pop()).unwrap_or_else(|| panic!("redis {args:?} got no answer"))
    }

    /// Runs the commands one after another on one connection, and returns
    /// their answers; `None` if one does not come within two seconds.
    fn try_commands(&self, commands: &[&[&str]]) -> Option<Vec<String>> {
        let mut stream = UnixStream::connect(self.socket()).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut out = String::new();
        for args in commands {
            out.push_str(&format!("*{}\r\n", args.len()));
            for arg in *args {
                out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
            }
        }
        stream.write_all(out.as_bytes()).ok()?;
        let mut reader = Reader { stream, buf: Vec::new() };
        commands.iter().map(|_| reader.reply()).collect()
    }

    /// Sends `SIGSTOP`: the server holds its connections and answers nothing.
    pub fn pause(&self) {
        signal(self.pid(), libc::SIGSTOP);
    }

    /// Sends `SIGCONT` after [`pause`](Self::pause).
    pub fn resume(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// Kills the server with `SIGKILL` and waits for it: every key is gone
    /// (no persistence) unless it was started with some.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again, on the same socket and port, after [`kill`](Self::kill).
    pub fn restart(&mut self) {
        self.restart_with(&[]);
    }

    /// [`restart`](Self::restart) with more configuration directives, for
    /// this start only. A server that saved its data (`SAVE`) loads it.
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.kill();
        let _ = std::fs::remove_file(self.socket());
        let kept = self.extra.clone();
        self.extra.extend(extra.iter().map(|s| s.to_string()));
        self.launch();
        self.extra = kept;
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn signal(pid: i32, signal: i32) {
    assert!(pid > 0, "no server process");
    // SAFETY: a plain call; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill({pid}, {signal})");
}

/// Reads one RESP reply and renders it as text: a status, error, integer
/// or bulk string as itself (nil as an empty line), an array as its items,
/// one per line.
struct Reader {
    stream: UnixStream,
    buf: Vec<u8>,
}

impl Reader {
    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 2);
                return Some(line);
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> Option<()> {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).ok()?;
        (n > 0).then(|| self.buf.extend_from_slice(&chunk[..n]))
    }

    fn reply(&mut self) -> Option<String> {
        let line = self.line()?;
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" | ":" => Some(rest.to_string()),
            "-" => Some(format!("ERROR {rest}")),
            "$" => {
                let len: i64 = rest.parse().ok()?;
                if len < 0 {
                    return Some(String::new());
                }
                while self.buf.len() < len as usize + 2 {
                    self.fill()?;
                }
                let text = String::from_utf8_lossy(&self.buf[..len as usize]).into_owned();
                self.buf.drain(..len as usize + 2);
                Some(text)
            }
            "*" => {
                let count: i64 = rest.parse().ok()?;
                let items: Option<Vec<String>> = (0..count.max(0)).map(|_| self.reply()).collect();
                Some(items?.join("\n"))
            }
            _ => None,
        }
    }
}

fn with_query(spec: String, query: &str) -> String {
    if query.is_empty() {
        spec
    } else {
        format!("{spec}?{query}")
    }
}

/// Percent-encodes what a spec's target may not hold as itself.
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A loopback port nobody listens on now, whose cluster bus port (10000
/// above it) is free too.
fn free_port() -> u16 {
    loop {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("its address").port();
        if port < 55535 && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

/// A Redis Cluster of `masters` nodes on loopback, made with
/// `redis-cli --cluster create`, each node a [`Redis`] of its own.
pub struct RedisCluster {
    /// The nodes, in the order their slots were given out (the first has
    /// slot 0).
    pub nodes: Vec<Redis>,
}

impl RedisCluster {
    /// Starts the nodes, joins them into one cluster and waits until every
    /// node says the cluster is up.
    pub fn start(masters: usize) -> RedisCluster {
        let nodes: Vec<Redis> = (0..masters)
            .map(|_| Redis::start(&["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]))
            .collect();
        let addresses: Vec<String> = nodes.iter().map(|node| format!("127.0.0.1:{}", node.port())).collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("redis-cli --cluster create: {e}"));
        assert!(created.status.success(), "redis-cli --cluster create: {}", String::from_utf8_lossy(&created.stdout));
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &nodes {
            while !node.command(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
                assert!(Instant::now() < deadline, "the cluster never came up");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        RedisCluster { nodes }
    }

    /// The node that serves `key`'s slot, by its index, and the slot.
    pub fn owner_of(&self, key: &str) -> (usize, u16) {
        let slot: u16 = self.nodes[0].command(&["CLUSTER", "KEYSLOT", key]).parse().expect("a slot number");
        let owner = self.nodes.iter().position(|node| serves(node, slot)).expect("some node serves every slot");
        (owner, slot)
    }

    /// A node's id in the cluster.
    pub fn id_of(&self, node: usize) -> String {
        self.nodes[node].command(&["CLUSTER", "MYID"])
    }
}

/// Whether `node` serves `slot`, by its own view of the cluster.
fn serves(node: &Redis, slot: u16) -> bool {
    let me = node.command(&["CLUSTER", "MYID"]);
    let nodes = node.command(&["CLUSTER", "NODES"]);
    nodes.lines().filter(|line| line.starts_with(&me)).any(|line| {
        line.split(' ').skip(8).any(|range| {
            let mut ends = range.split('-').map(|n| n.parse::<u16>());
            match (ends.next(), ends.next()) {
                (Some(Ok(first)), Some(Ok(last))) => (first..=last).contains(&slot),
                (Some(Ok(only)), None) => only == slot,
                _ => false,
            }
        })
    })
}

/// A new directory of this process's, short enough for a socket's path
/// (108 bytes), world-readable so that a test's other users reach its socket.
fn unique_dir(label: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicU32, Ordering};
    static SERIAL: AtomicU32 = AtomicU32::new(0);
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new("/tmp").join(format!("lk-{label}-{}-{serial}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod the server's directory");
    dir
}
