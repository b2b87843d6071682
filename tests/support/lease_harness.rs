//! Helpers for the lease tests: a database per test, fast lease timings, the
//! server clock, a record of side effects, a cuttable TCP proxy in front of
//! MongoDB, and child processes that re-execute the test binary.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meili_reconciler::lease::store::{JobRecord, JobStore};
use meili_reconciler::lease::{clock, run_single_flight, Guard, LeaseError, LeaseOptions, Outcome};
use meili_reconciler::progress::Progress;
use mongodb::bson::DateTime;
use mongodb::options::{ClientOptions, ServerAddress};
use mongodb::{Client, Database};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{mongo_uri, unique_name};

/// A fresh client (its own connection pool, like a separate replica).
pub async fn client() -> Client {
    Client::with_uri_str(mongo_uri())
        .await
        .expect("MONGO_URI parses")
}

/// A database unique to this test, on a fresh client.
pub async fn database(tag: &str) -> Database {
    client().await.database(&unique_name(tag))
}

/// `db` through a fresh client (another replica's view of the same data).
pub async fn same_database(db: &Database) -> Database {
    client().await.database(db.name())
}

/// Short timings for tests: the lease timings of [`super::timing::lease`]
/// (renew every 250 ms, poll every 100 ms, a ttl and safety margin with the
/// headroom a loaded machine needs), failure backoff 1 s.
pub fn fast_options(job: &str, owner: &str) -> LeaseOptions {
    let mut opts = LeaseOptions::new(owner);
    opts.job = job.to_string();
    super::timing::lease().apply(&mut opts);
    opts.failure_backoff = Duration::from_secs(1);
    opts.failure_backoff_max = Duration::from_secs(10);
    opts.unreachable_timeout = Duration::from_secs(10);
    opts
}

pub async fn server_now(db: &Database) -> DateTime {
    clock::server_now(db).await.expect("server time")
}

/// The job document as the protocol reads it.
pub async fn read_job(db: &Database, opts: &LeaseOptions) -> Option<JobRecord> {
    JobStore::new(db, opts)
        .read()
        .await
        .expect("read the job document")
}

/// The expiry fields of a job document as this service writes them: its
/// lease ends at `lease_end`, `expiresAt` (what LibreChat's claim reads) lies
/// `opts.librechat_clock_skew` later, and `writtenExpiresAt` records that we
/// wrote it (see `src/lease/store.rs`).
pub fn our_expiry(opts: &LeaseOptions, lease_end: DateTime) -> mongodb::bson::Document {
    let librechat_end = clock::later(lease_end, opts.librechat_clock_skew);
    mongodb::bson::doc! {
        "leaseExpiresAt": lease_end,
        "expiresAt": librechat_end,
        "writtenExpiresAt": librechat_end,
    }
}

/// Side effects a test job performed, stamped with the local monotonic time
/// at which it decided to perform them (just before its `guard.check()`).
#[derive(Clone, Default)]
pub struct Effects(Arc<Mutex<Vec<Instant>>>);

impl Effects {
    pub fn record(&self, at: Instant) {
        self.0.lock().unwrap().push(at);
    }
    pub fn all(&self) -> Vec<Instant> {
        self.0.lock().unwrap().clone()
    }
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A job that signals its start, then does side effects every 20 ms (each
/// after a `guard.check()`) until it is stopped.
pub async fn run_until_stopped(
    guard: Guard,
    progress: Progress,
    started: Option<oneshot::Sender<Guard>>,
    effects: Effects,
) -> anyhow::Result<serde_json::Value> {
    progress.phase("endless", 0);
    if let Some(started) = started {
        let _ = started.send(guard.clone());
    }
    loop {
        let decided_at = Instant::now();
        guard.check()?;
        effects.record(decided_at);
        progress.advance(1);
        tokio::select! {
            _ = guard.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

/// Starts an owner running `run_until_stopped` and waits until its job runs.
pub async fn start_endless_owner(
    db: &Database,
    opts: LeaseOptions,
    effects: Effects,
) -> (
    tokio::task::JoinHandle<Result<Outcome, LeaseError>>,
    Guard,
    CancellationToken,
) {
    start_endless_owner_on(same_database(db).await, opts, effects).await
}

/// [`start_endless_owner`] on `db` itself (e.g. a client with faults).
pub async fn start_endless_owner_on(
    db: Database,
    opts: LeaseOptions,
    effects: Effects,
) -> (
    tokio::task::JoinHandle<Result<Outcome, LeaseError>>,
    Guard,
    CancellationToken,
) {
    let shutdown = CancellationToken::new();
    let (started_tx, started_rx) = oneshot::channel();
    let stop = shutdown.clone();
    let owner = tokio::spawn(async move {
        let mut started = Some(started_tx);
        let mut job = move |guard: Guard, progress: Progress| {
            run_until_stopped(guard, progress, started.take(), effects.clone())
        };
        run_single_flight(&db, &opts, &mut job, Progress::new(), stop).await
    });
    let guard = tokio::time::timeout(Duration::from_secs(10), started_rx)
        .await
        .expect("the owner's job starts")
        .expect("the owner's job starts");
    (owner, guard, shutdown)
}

/// A TCP proxy to MongoDB that a test can cut: [`MongoProxy::cut`] closes the
/// listener and every forwarded connection, as a network partition would.
/// [`MongoProxy::lose_reply_to`] makes it forward the next request for one
/// command, swallow the server's reply and reset the connection: the write
/// is applied, the client never learns it. That needs the proxy to read the
/// wire protocol ([`MongoProxy::start`]), which it cannot through TLS; one
/// started with [`MongoProxy::start_opaque`] forwards bytes unread (TLS
/// too) and can only be cut.
pub struct MongoProxy {
    pub addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
    connections: Arc<Mutex<JoinSet<()>>>,
    lose: Arc<Mutex<Option<String>>>,
    lost: Arc<std::sync::atomic::AtomicUsize>,
}

/// One wire-protocol message: the 16-byte header and the rest.
pub async fn read_message(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
) -> std::io::Result<(Vec<u8>, i32, i32)> {
    use tokio::io::AsyncReadExt;
    let mut header = [0u8; 16];
    from.read_exact(&mut header).await?;
    let length = i32::from_le_bytes(header[0..4].try_into().unwrap()) as usize;
    let request_id = i32::from_le_bytes(header[4..8].try_into().unwrap());
    let response_to = i32::from_le_bytes(header[8..12].try_into().unwrap());
    let mut message = header.to_vec();
    message.resize(length.max(16), 0);
    from.read_exact(&mut message[16..]).await?;
    Ok((message, request_id, response_to))
}

/// The command name of an OP_MSG request (its body's first key).
fn command_name(message: &[u8]) -> Option<String> {
    const OP_MSG: i32 = 2013;
    let op = i32::from_le_bytes(message.get(12..16)?.try_into().ok()?);
    // header, flagBits, then section kind 0: one BSON document.
    if op != OP_MSG || *message.get(20)? != 0 {
        return None;
    }
    let body = mongodb::bson::Document::from_reader(&mut &message[21..]).ok()?;
    body.keys().next().map(|k| k.to_string())
}

impl MongoProxy {
    /// Proxies to `upstream` ("host:port"), message by message.
    pub async fn start(upstream: String) -> Self {
        Self::start_with(upstream, false).await
    }

    /// Proxies to `upstream` byte by byte, reading nothing (TLS passes
    /// through); [`MongoProxy::lose_reply_to`] does nothing then.
    pub async fn start_opaque(upstream: String) -> Self {
        Self::start_with(upstream, true).await
    }

    async fn start_with(upstream: String, opaque: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let lose: Arc<Mutex<Option<String>>> = Arc::default();
        let lost = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tracked = connections.clone();
        let (lose_in, lost_in) = (lose.clone(), lost.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let (lose, lost) = (lose_in.clone(), lost_in.clone());
                tracked.lock().unwrap().spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&upstream).await {
                        if opaque {
                            let mut inbound = inbound;
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        } else {
                            forward(inbound, outbound, lose, lost).await;
                        }
                    }
                });
            }
        });
        MongoProxy {
            addr,
            accept,
            connections,
            lose,
            lost,
        }
    }

    /// Stops accepting and drops every forwarded connection.
    pub fn cut(&self) {
        self.accept.abort();
        self.connections.lock().unwrap().abort_all();
    }

    /// The next request for `command` is forwarded, its reply swallowed and
    /// the client's connection reset.
    pub fn lose_reply_to(&self, command: &str) {
        *self.lose.lock().unwrap() = Some(command.to_string());
    }

    /// How many replies were swallowed so far.
    pub fn replies_lost(&self) -> usize {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Forwards one connection message by message, losing a reply when asked.
async fn forward(
    inbound: TcpStream,
    outbound: TcpStream,
    lose: Arc<Mutex<Option<String>>>,
    lost: Arc<std::sync::atomic::AtomicUsize>,
) {
    let (mut client_read, mut client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    // The request id whose reply is to be lost.
    let doomed = Arc::new(Mutex::new(None::<i32>));
    let marked = doomed.clone();
    let requests = async move {
        while let Ok((message, request_id, _)) = read_message(&mut client_read).await {
            let name = command_name(&message);
            {
                let mut lose = lose.lock().unwrap();
                if name.is_some() && *lose == name {
                    *lose = None;
                    *marked.lock().unwrap() = Some(request_id);
                }
            }
            if server_write.write_all(&message).await.is_err() {
                break;
            }
        }
    };
    let replies = async move {
        while let Ok((message, _, response_to)) = read_message(&mut server_read).await {
            if *doomed.lock().unwrap() == Some(response_to) {
                lost.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return; // dropping both halves resets the client's connection
            }
            if client_write.write_all(&message).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        _ = requests => {}
        _ = replies => {}
    }
}

/// The primary's address ("host:port") as the server names it.
pub async fn primary_address(db: &Database) -> String {
    let hello = db
        .run_command(mongodb::bson::doc! { "hello": 1 })
        .await
        .unwrap();
    if let Ok(primary) = hello.get_str("primary") {
        return primary.to_string();
    }
    let options = ClientOptions::parse(mongo_uri()).await.unwrap();
    options.hosts[0].to_string()
}

/// A client that reaches MongoDB only through `proxy` (credentials and
/// options from MONGO_URI). A cut shows at once (refused connections, closed
/// sockets); the timeouts, a headroom (`support::timing`), only bound a
/// connection that hangs.
pub async fn client_via(proxy: &MongoProxy) -> Client {
    let mut options = ClientOptions::parse(mongo_uri()).await.unwrap();
    options.hosts = vec![ServerAddress::Tcp {
        host: proxy.addr.ip().to_string(),
        port: Some(proxy.addr.port()),
    }];
    options.direct_connection = Some(true);
    options.server_selection_timeout = Some(super::timing::headroom());
    options.connect_timeout = Some(super::timing::headroom());
    Client::with_options(options).unwrap()
}

/// The environment variable that puts a re-executed test binary in child mode.
pub const CHILD_MODE: &str = "LEASE_TEST_CHILD";

/// A child process running `child_test` of the current test binary, with
/// `env` set; lines it prints starting with `@@ ` arrive on `events`.
pub struct ChildProcess {
    pub child: Child,
    pub stdin: ChildStdin,
    pub events: mpsc::UnboundedReceiver<String>,
    /// The pid of the process running the test (under `faketime` it is not
    /// `child`'s pid); known after [`ChildProcess::expect`] `"pid"`.
    pub pid: Option<i32>,
}

impl ChildProcess {
    /// Spawns `[wrapper..] current_exe --exact child_test --ignored`.
    pub fn spawn(wrapper: &[&str], child_test: &str, env: &[(&str, String)]) -> Self {
        let exe = std::env::current_exe().unwrap();
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&exe);
                command
            }
            None => Command::new(&exe),
        };
        command
            .args([
                "--exact",
                child_test,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_MODE, "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn the child test process");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        // The child's stderr (logs, panics) shows with this test's output.
        let stderr = child.stderr.take().unwrap();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("[child] {line}");
            }
        });
        let (tx, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                // The test harness may print "test name ... " first on the line.
                if let Some(at) = line.find("@@ ") {
                    if tx.send(line[at + 3..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        ChildProcess {
            child,
            stdin,
            events,
            pid: None,
        }
    }

    /// The next event, which must start with `prefix`; returns the rest.
    pub async fn expect(&mut self, prefix: &str, within: Duration) -> String {
        let event = tokio::time::timeout(within, self.events.recv())
            .await
            .unwrap_or_else(|_| panic!("no `{prefix}` event from the child within {within:?}"))
            .unwrap_or_else(|| panic!("the child exited before `{prefix}`"));
        let rest = event
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("expected `{prefix}…` from the child, got `{event}`"));
        if prefix == "pid" {
            self.pid = Some(rest.trim().parse().unwrap());
        }
        rest.trim().to_string()
    }

    /// The next event, whatever it is.
    pub async fn next(&mut self, within: Duration) -> Option<String> {
        tokio::time::timeout(within, self.events.recv())
            .await
            .ok()
            .flatten()
    }

    pub async fn send(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends `signal` to the process running the test.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self.pid.expect("the child's pid event was read");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
    }
}

impl Drop for ChildProcess {
    /// Kills the process running the test even when a wrapper (`faketime`)
    /// stands between it and us, so a failed test leaves no process behind.
    /// Only while the direct child still runs: the wrapper has then not
    /// reaped the test process, so its pid cannot have been reused.
    fn drop(&mut self) {
        if let (Some(pid), Ok(None)) = (self.pid, self.child.try_wait()) {
            let pid = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Reads a child's environment variable (child mode only).
pub fn child_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child mode needs {name}"))
}

/// Prints an event for the parent (child mode).
pub fn emit(event: impl std::fmt::Display) {
    use std::io::Write;
    // The parent may be gone (it killed us or failed); that is not our error.
    let _ = writeln!(std::io::stdout(), "@@ {event}");
}
