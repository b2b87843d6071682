//! A connection MongoDB closes under the server clock's `hello`: the
//! command is sent again on a new connection, as the driver does for reads
//! (but not for `run_command`), so one dropped connection does not fail a
//! run (`lease::clock::server_now`, behind `mongo::server_time`).

use crate::support;

use meili_reconciler::mongo::server_time;
use support::faults::{monitored_client, times, FailCommand};

const APP: &str = "clock-connection-closed";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_whose_connection_is_closed_is_sent_again() {
    let Some(fail) = FailCommand::new(APP).await else {
        return;
    };
    let (client, log) = monitored_client(APP, true, None).await;
    let db = client.database("clock_connection_closed");
    server_time(&db)
        .await
        .expect("the server clock, before any fault");
    // The fail point also matches the driver's own heartbeats (same
    // appName): should one of them take it, ours went through unharmed and
    // proved nothing, so the fault is set again.
    for _ in 0..5 {
        let before = log.all().len();
        fail.close_connection(&["hello"], times(1)).await;
        let clock = server_time(&db).await;
        let hellos: Vec<_> = log.all()[before..]
            .iter()
            .filter(|sent| sent.name == "hello")
            .cloned()
            .collect();
        let failed = hellos.iter().filter(|h| matches!(h.reply, Some(Err(_))));
        if failed.count() == 0 {
            continue;
        }
        fail.off().await;
        assert!(
            clock.is_ok(),
            "the server clock failed after the closed connection: {clock:?}"
        );
        assert_eq!(
            hellos.len(),
            2,
            "one failed hello, one sent again: {hellos:?}"
        );
        return;
    }
    fail.off().await;
    panic!("the closed connection never met the server clock's hello in 5 tries");
}
