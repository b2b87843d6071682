//! TCP proxies that record what one process sends to a server, so a test
//! can prove a process wrote nothing from some moment on:
//! [`MongoWrites`] parses the wire protocol and counts write commands by
//! collection; [`HttpRequests`] records the request lines sent to an HTTP
//! server (Meilisearch). [`reset`](MongoWrites::reset) starts a new window.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use mongodb::bson::{Bson, Document};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::lease_harness::read_message;

const WRITE_COMMANDS: &[&str] = &["insert", "update", "delete", "findAndModify"];

/// A MongoDB proxy counting write commands per `command collection`.
pub struct MongoWrites {
    pub addr: SocketAddr,
    seen: Arc<Mutex<BTreeMap<String, usize>>>,
    accept: tokio::task::JoinHandle<()>,
}

/// The command document of an OP_MSG request (its kind-0 section).
fn command_body(message: &[u8]) -> Option<Document> {
    const OP_MSG: i32 = 2013;
    let op = i32::from_le_bytes(message.get(12..16)?.try_into().ok()?);
    if op != OP_MSG {
        return None;
    }
    // Sections after the header and flagBits; the body is the kind-0 one.
    let mut at = 20;
    while at < message.len() {
        let kind = message[at];
        at += 1;
        let size = i32::from_le_bytes(message.get(at..at + 4)?.try_into().ok()?) as usize;
        if kind == 0 {
            return Document::from_reader(&mut &message[at..at + size]).ok();
        }
        at += size;
    }
    None
}

impl MongoWrites {
    /// Proxies to `upstream` ("host:port").
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
        let counted = seen.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let seen = counted.clone();
                tokio::spawn(async move {
                    let (mut client_read, mut client_write) = inbound.into_split();
                    let (mut server_read, mut server_write) = outbound.into_split();
                    let requests = async move {
                        while let Ok((message, _, _)) = read_message(&mut client_read).await {
                            if let Some(body) = command_body(&message) {
                                let name = body.keys().next().cloned().unwrap_or_default();
                                if WRITE_COMMANDS.contains(&name.as_str()) {
                                    let target = match body.get(&name) {
                                        Some(Bson::String(c)) => c.clone(),
                                        _ => String::new(),
                                    };
                                    *seen
                                        .lock()
                                        .unwrap()
                                        .entry(format!("{name} {target}"))
                                        .or_default() += 1;
                                }
                            }
                            if server_write.write_all(&message).await.is_err() {
                                break;
                            }
                        }
                    };
                    let replies = tokio::io::copy(&mut server_read, &mut client_write);
                    tokio::select! {
                        _ = requests => {}
                        _ = replies => {}
                    }
                });
            }
        });
        MongoWrites { addr, seen, accept }
    }

    /// Write commands seen since the last reset, as `command collection` → count.
    pub fn writes(&self) -> BTreeMap<String, usize> {
        self.seen.lock().unwrap().clone()
    }

    pub fn reset(&self) {
        self.seen.lock().unwrap().clear();
    }
}

impl Drop for MongoWrites {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// An HTTP proxy recording the request lines a client sends.
pub struct HttpRequests {
    pub addr: SocketAddr,
    sent: Arc<Mutex<Vec<u8>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl HttpRequests {
    /// Proxies to `upstream` ("host:port").
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent: Arc<Mutex<Vec<u8>>> = Arc::default();
        let recorded = sent.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let sent = recorded.clone();
                tokio::spawn(async move {
                    let (mut client_read, mut client_write) = inbound.into_split();
                    let (mut server_read, mut server_write) = outbound.into_split();
                    let requests = async move {
                        let mut buffer = [0u8; 16 * 1024];
                        while let Ok(n) = client_read.read(&mut buffer).await {
                            if n == 0 {
                                break;
                            }
                            sent.lock().unwrap().extend_from_slice(&buffer[..n]);
                            if server_write.write_all(&buffer[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    let replies = tokio::io::copy(&mut server_read, &mut client_write);
                    tokio::select! {
                        _ = requests => {}
                        _ = replies => {}
                    }
                });
            }
        });
        HttpRequests { addr, sent, accept }
    }

    /// The request lines (`METHOD /path`) seen since the last reset that
    /// change something (anything but GET and HEAD).
    pub fn writes(&self) -> Vec<String> {
        let sent = self.sent.lock().unwrap();
        let text = String::from_utf8_lossy(&sent);
        ["POST /", "PUT /", "PATCH /", "DELETE /"]
            .iter()
            .flat_map(|method| {
                text.match_indices(method)
                    .map(|(at, _)| text[at..].lines().next().unwrap_or("").to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Every byte sent since the last reset.
    pub fn bytes(&self) -> usize {
        self.sent.lock().unwrap().len()
    }

    pub fn reset(&self) {
        self.sent.lock().unwrap().clear();
    }
}

impl Drop for HttpRequests {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
