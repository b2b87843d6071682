//! Serving, and the `refuse` outage: the listening socket is bound with
//! `SO_REUSEADDR` so that after an outage closes it (and, through axum's
//! graceful shutdown, every open connection) the same port can be bound again
//! at once. Connections made during the outage are refused by the kernel.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};

use crate::routes::router;
use crate::state::AppState;

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Binds again after an outage, retrying briefly if the port is still busy.
async fn rebind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let mut attempt = 0;
    loop {
        match bind(addr) {
            Ok(listener) => return Ok(listener),
            Err(error) if attempt >= 100 => return Err(error),
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Serves on `addr` until the process is killed.
pub async fn serve(addr: SocketAddr, state: AppState) -> std::io::Result<()> {
    let mut listener = bind(addr)?;
    let addr = listener.local_addr()?;
    state.knobs.set_bound_addr(addr);
    println!("meili-standin listening on {addr}");
    loop {
        let app = router(state.clone());
        let knobs_state = state.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.await;
                })
                .await;
            if let Err(error) = served {
                eprintln!("meili-standin: serving failed: {error}");
            }
        });
        knobs_state.knobs.refusal_requested.notified().await;
        let _ = stop_tx.send(());
        tokio::time::sleep(Duration::from_millis(state.knobs.refusal_ms())).await;
        listener = rebind(addr).await?;
    }
}
