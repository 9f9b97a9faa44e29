//! One connection to a Redis server.
//!
//! Made when first needed, with its login and database, and kept for the
//! next call. Every exchange ends by its deadline, whatever the server
//! does. Any trouble in the middle of one (no answer in time, a stream cut
//! or out of step) drops the connection, so that the next call starts on a
//! fresh one instead of reading an answer meant for an earlier question. A
//! child of `fork()` never uses its parent's connection: the two would
//! read each other's answers.

use core::time::Duration;

use super::resp::{self, Parsed, Reply};
use crate::clock::MonoTime;
use crate::endpoint::{Endpoint, Host};
use crate::error::{Error, ServerError, ServerProblem};
use crate::kept::KeptFd;
use crate::resolver::{self, NotResolved};
use crate::sys::{self, Errno, Fd, Ready, SocketAddress};

/// Room for one command: a script's name and its keys and arguments, each
/// at most a few hundred bytes (the script's source, sent once per server
/// with `EVAL`, is the largest).
const OUTPUT_CAPACITY: usize = 8 * 1024;

/// Room for one answer.
const INPUT_CAPACITY: usize = resp::LONGEST_REPLY;

/// The port a target without one means.
pub const DEFAULT_PORT: u16 = 6379;

/// How many redirections one question follows: a cluster that is moving
/// the slot sends one or two; more is a loop.
const MOST_REDIRECTS: usize = 5;

/// A cluster node's answer that another node serves the key's slot:
/// `MOVED <slot> <host>:<port>` for good, `ASK <slot> <host>:<port>` for
/// this one question, while the slot moves.
struct Redirect<'a> {
    ask: bool,
    host: &'a [u8],
    port: u16,
}

impl<'a> Redirect<'a> {
    fn of(said: &'a [u8]) -> Option<Redirect<'a>> {
        let mut words = said.split(|&b| b == b' ');
        let ask = match words.next()? {
            b"MOVED" => false,
            b"ASK" => true,
            _ => return None,
        };
        let (_slot, target) = (words.next()?, words.next()?);
        let colon = target.iter().rposition(|&b| b == b':')?;
        let port = crate::text::parse_u64(&target[colon + 1..]).and_then(|port| u16::try_from(port).ok())?;
        Some(Redirect { ask, host: &target[..colon], port })
    }

    /// The node's address: an IP address, as nodes announce themselves,
    /// or a name (`cluster-announce-hostname`) for the resolver.
    fn address(&self, deadline: MonoTime) -> Result<SocketAddress, Error> {
        host_address(self.host, self.port, deadline)
    }
}

/// A script of this library: its source and the name `EVALSHA` knows it by.
pub struct Script {
    /// The Lua source, which `EVAL` sends.
    pub source: &'static str,
    /// Its SHA-1 in hex, which `EVALSHA` sends.
    pub sha: [u8; 40],
}

/// A connection, open or not yet.
pub struct Connection {
    /// The server, its login and database.
    endpoint: Endpoint,
    /// Resolved at the first connect and kept: a name is looked up once.
    address: Option<SocketAddress>,
    /// Whether `address` is a node a redirection named rather than the
    /// endpoint's: forgotten when it cannot be reached.
    redirected: bool,
    /// The connection, and which process opened it ([`KeptFd`]).
    socket: Option<KeptFd>,
    output: [u8; OUTPUT_CAPACITY],
    input: [u8; INPUT_CAPACITY],
    /// Bytes of `input` received.
    filled: usize,
    /// Bytes of `input` that the last whole reply takes.
    reply_len: usize,
    /// The server's clock less this host's monotonic clock, in ms, as
    /// measured when the connection was made.
    server_clock_offset_ms: Option<i64>,
    /// Whether the connection was found fit just now ([`ready`](Self::ready)),
    /// so that the question that follows at once need not look again.
    just_checked: bool,
}

impl core::fmt::Debug for Connection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Connection {{ endpoint: {:?}, open: {} }}", self.endpoint, self.socket.is_some())
    }
}

impl Connection {
    /// A connection that will be made at the first exchange.
    pub fn new(endpoint: Endpoint) -> Connection {
        Connection {
            endpoint,
            address: None,
            redirected: false,
            socket: None,
            output: [0; OUTPUT_CAPACITY],
            input: [0; INPUT_CAPACITY],
            filled: 0,
            reply_len: 0,
            server_clock_offset_ms: None,
            just_checked: false,
        }
    }

    /// `deadline` on the server's clock, in Unix ms, for a script to refuse
    /// a request that reaches it too late (held up in a stopped server's
    /// buffers) to be the caller's any more; connects first, to compare
    /// the clocks. Errs late by at most the round trip it was measured
    /// with.
    pub fn server_deadline_ms(&mut self, deadline: MonoTime) -> Result<u64, Error> {
        self.ready(deadline)?;
        let local_ms = i64::try_from(deadline.since(MonoTime::EPOCH).as_millis()).unwrap_or(i64::MAX);
        let offset = self.server_clock_offset_ms.unwrap_or(0);
        Ok(u64::try_from(local_ms.saturating_add(offset)).unwrap_or(0))
    }

    /// Forgets the connection and what was measured on it: the next
    /// exchange makes a new one.
    pub fn reset(&mut self) {
        self.socket = None;
        self.server_clock_offset_ms = None;
        self.just_checked = false;
    }

    /// Sends `args` as one command and reads its answer, by `deadline`;
    /// [`reply`](Self::reply) gives the answer. An error answer is an
    /// answer: it is the caller's to judge. A cluster node's redirection
    /// (`MOVED`, `ASK`) is followed: the command was not run there.
    pub fn exchange(&mut self, args: &[&[u8]], deadline: MonoTime) -> Result<(), Error> {
        let mut asking = false;
        for _ in 0..=MOST_REDIRECTS {
            self.exchange_here(args, asking, deadline)?;
            let Reply::Error(said) = self.reply() else { return Ok(()) };
            let Some(redirect) = Redirect::of(said) else { return Ok(()) };
            let (address, ask) = (redirect.address(deadline)?, redirect.ask);
            // The node that owns the slot now: every later question goes
            // there too (`MOVED`); for `ASK`, only this one is its, but the
            // next one is sent back by a `MOVED` as long as the slot moves.
            if self.address.is_some_and(|current| !current.same_as(&address)) {
                self.reset();
            }
            self.address = Some(address);
            self.redirected = true;
            asking = ask;
        }
        Err(Error::Server(ServerError::said(ServerProblem::Refused, b"too many cluster redirections")))
    }

    /// [`exchange`](Self::exchange) with the node connected to now; after
    /// an `ASK`, prefixed with `ASKING`.
    fn exchange_here(&mut self, args: &[&[u8]], asking: bool, deadline: MonoTime) -> Result<(), Error> {
        if !core::mem::take(&mut self.just_checked) || self.socket.is_none() {
            self.ready(deadline)?;
            self.just_checked = false;
        }
        let mut outcome = Ok(());
        if asking {
            outcome = self.send(&[b"ASKING"], deadline).and_then(|()| self.receive(deadline));
        }
        outcome = outcome.and_then(|()| self.send(args, deadline)).and_then(|()| self.receive(deadline));
        if outcome.is_err() {
            self.socket = None;
        }
        outcome
    }

    /// A connection fit to carry a question: the one kept, or a new one.
    fn ready(&mut self, deadline: MonoTime) -> Result<(), Error> {
        if self.socket.as_ref().is_some_and(KeptFd::is_inherited) {
            // The parent's: forgotten here (not closed: the number may name
            // another file of this child's by now), still open there.
            self.socket = None;
        }
        // A server that restarted, or closed an idle connection, has left
        // the end of the stream in it: asking there would fail a question
        // that a new connection answers.
        if self.socket.as_ref().is_some_and(|socket| !sys::socket_is_idle(socket.fd())) {
            self.socket = None;
        }
        if self.socket.is_none() {
            self.connect(deadline)?;
        }
        self.just_checked = true;
        Ok(())
    }

    /// The answer of the last [`exchange`](Self::exchange) that succeeded.
    pub fn reply(&self) -> Reply<'_> {
        match resp::parse(&self.input[..self.reply_len]) {
            Ok(Parsed::Whole(reply, _)) => reply,
            // `receive` kept it only after it parsed whole.
            _ => Reply::Bulk(None),
        }
    }

    /// Runs `script` by its SHA-1, or by its source if the server does not
    /// know it yet; an error answer becomes the error it stands for, and
    /// [`reply`](Self::reply) gives any other.
    pub fn eval(&mut self, script: &Script, keys: &[&[u8]], args: &[&[u8]], deadline: MonoTime) -> Result<(), Error> {
        let mut count = crate::text::FixedText::<8>::new();
        let _ = core::fmt::Write::write_fmt(&mut count, format_args!("{}", keys.len()));
        let mut command: [&[u8]; 24] = [b""; 24];
        let len = 3 + keys.len() + args.len();
        if len > command.len() {
            return Err(Error::Server(ServerError::new(ServerProblem::Protocol, None)));
        }
        command[0] = b"EVALSHA";
        command[1] = &script.sha;
        command[2] = count.as_bytes();
        command[3..3 + keys.len()].copy_from_slice(keys);
        command[3 + keys.len()..len].copy_from_slice(args);
        self.exchange(&command[..len], deadline)?;
        if matches!(self.reply(), Reply::Error(said) if said.starts_with(b"NOSCRIPT")) {
            command[0] = b"EVAL";
            command[1] = script.source.as_bytes();
            self.exchange(&command[..len], deadline)?;
        }
        match self.reply() {
            Reply::Error(said) => Err(Error::Server(server_error(said))),
            _ => Ok(()),
        }
    }

    fn connect(&mut self, deadline: MonoTime) -> Result<(), Error> {
        let address = match self.address {
            Some(address) => address,
            None => {
                let address = address_of(&self.endpoint, deadline)?;
                self.address = Some(address);
                address
            }
        };
        let connected = self.connect_to(&address, deadline);
        if connected.is_err() && self.redirected {
            // The node a redirection named is gone: the endpoint names the
            // slot's owner now.
            self.address = None;
            self.redirected = false;
        }
        self.socket = Some(KeptFd::unlisted(connected?));
        let login = self.log_in(deadline);
        if login.is_err() {
            self.socket = None;
        }
        login
    }

    fn connect_to(&self, address: &SocketAddress, deadline: MonoTime) -> Result<Fd, Error> {
        let unreachable = |errno| Error::Server(ServerError::new(ServerProblem::Unreachable, Some(errno)));
        let (socket, connected) = sys::connect_start(address).map_err(unreachable)?;
        if !connected {
            if !wait_for(&socket, Ready::Write, deadline)? {
                return Err(Error::Server(ServerError::new(ServerProblem::NoAnswer, None)));
            }
            sys::socket_error(&socket).map_err(unreachable)?;
        }
        Ok(socket)
    }

    /// `AUTH` with the target's user and password, and `SELECT` of its
    /// database, when it names them.
    fn log_in(&mut self, deadline: MonoTime) -> Result<(), Error> {
        if let Some(password) = self.endpoint.password() {
            let password = *password;
            let user = self.endpoint.user;
            let auth: &[&[u8]] = match &user {
                Some(user) => &[b"AUTH", user.as_bytes(), password.as_bytes()],
                None => &[b"AUTH", password.as_bytes()],
            };
            self.send(auth, deadline)?;
            self.receive(deadline)?;
            if let Reply::Error(said) = self.reply() {
                // A full server, or one loading, is no refused login.
                let error = server_error(said);
                return Err(Error::Server(match error.problem {
                    ServerProblem::NotReady => error,
                    _ => ServerError::said(ServerProblem::AuthRefused, said),
                }));
            }
        }
        if let Some(db) = self.endpoint.db {
            let mut digits = crate::text::FixedText::<12>::new();
            let _ = core::fmt::Write::write_fmt(&mut digits, format_args!("{db}"));
            self.send(&[b"SELECT", digits.as_bytes()], deadline)?;
            self.receive(deadline)?;
            if let Reply::Error(said) = self.reply() {
                return Err(Error::Server(server_error(said)));
            }
        }
        self.measure_server_clock(deadline)
    }

    /// Asks the server's `TIME` and keeps its offset from this host's
    /// monotonic clock, taken when the question left (so that deadlines
    /// mapped with it err late, never early).
    fn measure_server_clock(&mut self, deadline: MonoTime) -> Result<(), Error> {
        let asked = MonoTime::now();
        self.send(&[b"TIME"], deadline)?;
        self.receive(deadline)?;
        let time = match self.reply() {
            Reply::Array(Some(mut items)) => {
                let seconds = items.next().and_then(|r| r.integer());
                let micros = items.next().and_then(|r| r.integer());
                seconds.zip(micros).map(|(s, us)| s.saturating_mul(1000).saturating_add(us / 1000))
            }
            Reply::Error(said) => return Err(Error::Server(server_error(said))),
            _ => None,
        };
        let time = time.ok_or(Error::Server(ServerError::new(ServerProblem::Protocol, None)))?;
        let asked_ms = i64::try_from(asked.since(MonoTime::EPOCH).as_millis()).unwrap_or(i64::MAX);
        self.server_clock_offset_ms = Some(time.saturating_sub(asked_ms));
        Ok(())
    }

    fn send(&mut self, args: &[&[u8]], deadline: MonoTime) -> Result<(), Error> {
        let socket = self
            .socket
            .as_ref()
            .map(KeptFd::fd)
            .ok_or(Error::Server(ServerError::new(ServerProblem::Disconnected, None)))?;
        match resp::encode(&mut self.output, args) {
            Some(len) => send_all(socket, &self.output[..len], deadline),
            // Longer than the buffer (a script sent whole, the first time a
            // server sees it): piece by piece, each from where it lies.
            None => resp::encode_in_pieces(args, |piece| send_all(socket, piece, deadline)),
        }
    }

    fn receive(&mut self, deadline: MonoTime) -> Result<(), Error> {
        self.filled = 0;
        self.reply_len = 0;
        let socket = self
            .socket
            .as_ref()
            .map(KeptFd::fd)
            .ok_or(Error::Server(ServerError::new(ServerProblem::Disconnected, None)))?;
        loop {
            match resp::parse(&self.input[..self.filled]) {
                Ok(Parsed::Whole(_, used)) if used == self.filled => {
                    self.reply_len = used;
                    return Ok(());
                }
                // More than one answer to one question: out of step.
                Ok(Parsed::Whole(..)) | Err(_) => {
                    return Err(Error::Server(ServerError::new(ServerProblem::Protocol, None)));
                }
                Ok(Parsed::Partial) if self.filled == INPUT_CAPACITY => {
                    return Err(Error::Server(ServerError::new(ServerProblem::Protocol, None)));
                }
                Ok(Parsed::Partial) => {}
            }
            match sys::recv_some(socket, &mut self.input[self.filled..]) {
                Ok(0) => return Err(Error::Server(ServerError::new(ServerProblem::Disconnected, None))),
                Ok(n) => self.filled += n,
                Err(Errno::EAGAIN) => {
                    if !wait_for(socket, Ready::Read, deadline)? {
                        return Err(Error::Server(ServerError::new(ServerProblem::NoAnswer, None)));
                    }
                }
                Err(errno) => return Err(Error::Server(ServerError::new(ServerProblem::Disconnected, Some(errno)))),
            }
        }
    }
}

/// Waits until `socket` is ready or `deadline` passes; `Ok(false)` then.
fn wait_for(socket: &Fd, ready: Ready, deadline: MonoTime) -> Result<bool, Error> {
    loop {
        let left = deadline.remaining_from(MonoTime::now());
        if left == Duration::ZERO {
            return Ok(false);
        }
        match sys::poll_socket(socket, ready, left) {
            Ok(true) => return Ok(true),
            // The time passed, or a signal: the clock says which.
            Ok(false) => {}
            Err(errno) => return Err(Error::Server(ServerError::new(ServerProblem::Disconnected, Some(errno)))),
        }
    }
}

/// Where the target's server listens: a unix socket, an IP address, or a
/// name the C library's resolver looks up, by `deadline`.
fn address_of(endpoint: &Endpoint, deadline: MonoTime) -> Result<SocketAddress, Error> {
    match &endpoint.host {
        Host::Socket(path) => SocketAddress::unix(path)
            .map_err(|errno| Error::Server(ServerError::new(ServerProblem::Unreachable, Some(errno)))),
        Host::Net { name, port } => host_address(name.as_bytes(), port.unwrap_or(DEFAULT_PORT), deadline),
    }
}

/// The address of `host`: an IP address in text, or a name the C
/// library's resolver looks up, by `deadline`. A resolver that does not
/// answer in time, or cannot now, leaves the server unreachable for now;
/// one that says there is no such name, for good.
fn host_address(host: &[u8], port: u16, deadline: MonoTime) -> Result<SocketAddress, Error> {
    let unknown = || Error::Server(ServerError::said(ServerProblem::UnknownHost, host));
    let text = core::str::from_utf8(host).map_err(|_| unknown())?;
    if let Ok(ip) = text.parse::<core::net::IpAddr>() {
        return Ok(SocketAddress::ip(ip, port));
    }
    let mut c_name = [0u8; crate::spec::VALUE_CAPACITY + 1];
    c_name.get_mut(..host.len()).ok_or_else(unknown)?.copy_from_slice(host);
    let c_name = core::ffi::CStr::from_bytes_until_nul(&c_name).map_err(|_| unknown())?;
    // A NUL inside the name would have it looked up cut short.
    if c_name.to_bytes().len() != host.len() {
        return Err(unknown());
    }
    resolver::resolve(c_name, port, deadline).map_err(|why| match why {
        NotResolved::NoSuchHost => unknown(),
        NotResolved::NotNow => {
            Error::Server(ServerError::said(ServerProblem::Unreachable, b"the resolver did not answer"))
        }
    })
}

/// The error an error answer stands for, by its first word.
pub fn server_error(said: &[u8]) -> ServerError {
    let word = said.split(|&b| b == b' ').next().unwrap_or(b"");
    let problem = match word {
        b"NOAUTH" | b"WRONGPASS" => ServerProblem::AuthRefused,
        // A client that has not logged in may send only short commands.
        _ if said.starts_with(b"ERR Protocol error: unauthenticated") => ServerProblem::AuthRefused,
        b"LOADING" | b"BUSY" | b"MASTERDOWN" | b"TRYAGAIN" | b"CLUSTERDOWN" => ServerProblem::NotReady,
        // `maxclients`: passes as soon as another client leaves.
        _ if said.starts_with(b"ERR max number of clients reached") => ServerProblem::NotReady,
        b"READONLY" => ServerProblem::ReadOnly,
        b"OOM" | b"MISCONF" => ServerProblem::NoWrites,
        b"WRONGTYPE" => ServerProblem::ForeignKeys,
        _ => ServerProblem::Refused,
    };
    ServerError::said(problem, said)
}

/// Sends all of `bytes` on `socket` by `deadline`.
fn send_all(socket: &Fd, bytes: &[u8], deadline: MonoTime) -> Result<(), Error> {
    let mut sent = 0;
    while sent < bytes.len() {
        match sys::send_some(socket, &bytes[sent..]) {
            Ok(n) => sent += n,
            Err(Errno::EAGAIN) => {
                if !wait_for(socket, Ready::Write, deadline)? {
                    return Err(Error::Server(ServerError::new(ServerProblem::NoAnswer, None)));
                }
            }
            Err(errno) => return Err(Error::Server(ServerError::new(ServerProblem::Disconnected, Some(errno)))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirection_names_the_node_and_whether_it_is_for_good() {
        let moved = Redirect::of(b"MOVED 3999 127.0.0.1:6381").unwrap();
        assert_eq!((moved.ask, moved.host, moved.port), (false, &b"127.0.0.1"[..], 6381));
        let ask = Redirect::of(b"ASK 12 ::1:7000").unwrap();
        assert_eq!(
            (ask.ask, ask.host, ask.port),
            (true, &b"::1"[..], 7000),
            "an IPv6 node: the port after the last colon"
        );
        assert!(ask.address(MonoTime::now()).is_ok(), "a numeric address, with no time to look anything up");
        for not_one in [&b"MOVED 3999"[..], b"MOVED 1 host", b"MOVED 1 host:99999", b"ERR MOVED 1 h:1", b"ASKING"] {
            assert!(Redirect::of(not_one).is_none(), "{:?}", core::str::from_utf8(not_one));
        }
    }

    #[test]
    fn error_answers_are_told_apart_by_their_first_word() {
        let cases: [(&[u8], ServerProblem); 9] = [
            (b"NOAUTH Authentication required.", ServerProblem::AuthRefused),
            (b"ERR Protocol error: unauthenticated multibulk length", ServerProblem::AuthRefused),
            (b"WRONGPASS invalid username-password pair or user is disabled.", ServerProblem::AuthRefused),
            (b"LOADING Redis is loading the dataset in memory", ServerProblem::NotReady),
            (b"BUSY Redis is busy running a script.", ServerProblem::NotReady),
            (b"READONLY You can't write against a read only replica.", ServerProblem::ReadOnly),
            (b"OOM command not allowed when used memory > 'maxmemory'.", ServerProblem::NoWrites),
            (b"WRONGTYPE Operation against a key holding the wrong kind of value", ServerProblem::ForeignKeys),
            (b"ERR DB index is out of range", ServerProblem::Refused),
        ];
        for (said, problem) in cases {
            let error = server_error(said);
            assert_eq!(error.problem, problem, "{:?}", core::str::from_utf8(said));
            assert!(said.starts_with(error.server_text()), "the server's words are kept");
        }
    }
}
