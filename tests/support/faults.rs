//! Server-side fault injection for the replica-set tests: MongoDB's
//! `configureFailPoint` / `failCommand` (the test MongoDB starts with
//! `--enable-test-commands`; a real `mongod` needs `enableTestCommands=1`),
//! scoped to one client by its `appName` so tests running in parallel are
//! not affected, and clients whose commands are recorded (command
//! monitoring) to see what was sent and answered.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mongodb::bson::{doc, Bson, Document};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::Client;

/// `failCommand` for the clients named `app`. The fail point is one per
/// server, so one test at a time holds it, whichever process it runs in
/// ([`super::turn`]); the next holder turns it off before using it.
pub struct FailCommand {
    admin: Client,
    pub app: String,
    _turn: super::turn::Turn,
}

impl FailCommand {
    /// `None` when the server refuses test commands, having said the test
    /// is skipped ([`super::skip::skip`]).
    /// Waits while another test holds the fail point.
    pub async fn new(app: &str) -> Option<Self> {
        let turn = super::turn::take("failpoint", super::mongo_uri()).await;
        let admin = Client::with_uri_str(super::mongo_uri()).await.unwrap();
        let fp = FailCommand {
            admin,
            app: app.to_string(),
            _turn: turn,
        };
        match fp.configure(doc! { "mode": "off" }).await {
            Ok(()) => Some(fp),
            Err(error) => {
                super::skip::skip(format_args!(
                    "the test MongoDB refuses configureFailPoint ({}); \
                     a MongoDB started with test commands enabled has it",
                    super::server::short_error(&error)
                ));
                None
            }
        }
    }

    async fn configure(&self, settings: Document) -> mongodb::error::Result<()> {
        let mut command = doc! { "configureFailPoint": "failCommand" };
        command.extend(settings);
        self.admin
            .database("admin")
            .run_command(command)
            .await
            .map(|_| ())
    }

    /// The next `times` of `commands` from our app are applied, then
    /// answered with a write-concern error (`wtimeout`): written, unconfirmed.
    pub async fn write_concern_error(&self, commands: &[&str], mode: Bson) {
        self.configure(doc! {
            "mode": mode,
            "data": {
                "failCommands": commands,
                "appName": &self.app,
                "writeConcernError": {
                    "code": 64,
                    "codeName": "WriteConcernFailed",
                    "errmsg": "waiting for replication timed out",
                    "errInfo": { "wtimeout": true },
                },
            },
        })
        .await
        .expect("configure failCommand");
    }

    /// The next `times` of `commands` fail with `code` without being applied
    /// (e.g. 10107 NotWritablePrimary, as a step-down answers).
    pub async fn error_code(&self, commands: &[&str], code: i32, mode: Bson) {
        self.configure(doc! {
            "mode": mode,
            "data": { "failCommands": commands, "appName": &self.app, "errorCode": code },
        })
        .await
        .expect("configure failCommand");
    }

    /// The next `commands` from our app (per `mode`) are held `block_ms`
    /// before they are executed (`blockConnection`): a slow server.
    pub async fn block(&self, commands: &[&str], block_ms: i32, mode: Bson) {
        self.configure(doc! {
            "mode": mode,
            "data": {
                "failCommands": commands,
                "appName": &self.app,
                "blockConnection": true,
                "blockTimeMS": block_ms,
            },
        })
        .await
        .expect("configure failCommand");
    }

    /// The next `commands` from our app (per `mode`) are answered by
    /// closing the connection (`closeConnection`): a connection the server
    /// dropped.
    pub async fn close_connection(&self, commands: &[&str], mode: Bson) {
        self.configure(doc! {
            "mode": mode,
            "data": { "failCommands": commands, "appName": &self.app, "closeConnection": true },
        })
        .await
        .expect("configure failCommand");
    }

    pub async fn off(&self) {
        self.configure(doc! { "mode": "off" })
            .await
            .expect("turn failCommand off");
    }
}

/// `MONGO_URI` with `appName=app`, so [`FailCommand`]s for `app` reach only
/// the processes given it.
pub fn uri_with_app(app: &str) -> String {
    let uri = super::mongo_uri();
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}appName={app}")
}

/// `{ times: n }`.
pub fn times(n: i32) -> Bson {
    Bson::Document(doc! { "times": n })
}

/// What a monitored client sent and what came back, per command.
#[derive(Clone, Debug)]
pub struct Sent {
    pub name: String,
    pub command: Document,
    /// The reply (or the failure's message), once it came.
    pub reply: Option<Result<Document, String>>,
    request_id: i32,
}

impl Sent {
    /// The collection a CRUD command names (`find: "x"`, `update: "x"`, …).
    pub fn collection(&self) -> Option<&str> {
        self.command.get_str(&self.name).ok()
    }

    /// Refused with E11000 (a claim that lost the race: nothing written).
    pub fn duplicate_key(&self) -> bool {
        match &self.reply {
            Some(Ok(reply)) => reply.get_i32("code") == Ok(11000),
            Some(Err(message)) => message.contains("11000"),
            None => false,
        }
    }

    /// Answered with a `writeConcernError`.
    pub fn write_concern_failed(&self) -> bool {
        match &self.reply {
            Some(Ok(reply)) => reply.contains_key("writeConcernError"),
            Some(Err(message)) => {
                message.contains("WriteConcern") || message.contains("write concern")
            }
            None => false,
        }
    }
}

/// The commands one client sent, in order.
#[derive(Clone, Default)]
pub struct CommandLog(Arc<Mutex<Vec<Sent>>>);

impl CommandLog {
    pub fn all(&self) -> Vec<Sent> {
        self.0.lock().unwrap().clone()
    }

    /// Commands on `collection`.
    pub fn on(&self, collection: &str) -> Vec<Sent> {
        self.all()
            .into_iter()
            .filter(|s| s.collection() == Some(collection))
            .collect()
    }

    fn record(&self, event: CommandEvent) {
        let mut log = self.0.lock().unwrap();
        match event {
            CommandEvent::Started(started) => log.push(Sent {
                name: started.command_name,
                command: started.command,
                reply: None,
                request_id: started.request_id,
            }),
            CommandEvent::Succeeded(done) => {
                if let Some(sent) = log
                    .iter_mut()
                    .rev()
                    .find(|s| s.request_id == done.request_id)
                {
                    sent.reply = Some(Ok(done.reply));
                }
            }
            CommandEvent::Failed(failed) => {
                if let Some(sent) = log
                    .iter_mut()
                    .rev()
                    .find(|s| s.request_id == failed.request_id)
                {
                    sent.reply = Some(Err(format!("{:?}", failed.failure)));
                }
            }
            _ => {}
        }
    }
}

/// A client named `app` (for `failCommand`'s `appName`) whose commands are
/// logged; `retry_writes: false` shows our own handling of an ambiguous
/// write instead of the driver's retry. `via` reaches MongoDB through a proxy.
pub async fn monitored_client(
    app: &str,
    retry_writes: bool,
    via: Option<std::net::SocketAddr>,
) -> (Client, CommandLog) {
    let mut options = ClientOptions::parse(super::mongo_uri()).await.unwrap();
    options.app_name = Some(app.to_string());
    options.retry_writes = Some(retry_writes);
    if let Some(addr) = via {
        options.hosts = vec![mongodb::options::ServerAddress::Tcp {
            host: addr.ip().to_string(),
            port: Some(addr.port()),
        }];
        options.direct_connection = Some(true);
    }
    options.server_selection_timeout = Some(Duration::from_secs(5));
    let log = CommandLog::default();
    let recorder = log.clone();
    options.command_event_handler =
        Some(EventHandler::callback(move |event| recorder.record(event)));
    (Client::with_options(options).unwrap(), log)
}
