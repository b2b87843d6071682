//! MongoDB credentials the server rejects: reported at once, not retried as
//! if the server were still starting, as a rejection (exit 4, as a rejected
//! Meilisearch key), and without the password.

use crate::support;

use mongodb::bson::doc;
use mongodb::error::ErrorKind;
use support::cli::Target;

#[tokio::test(flavor = "multi_thread")]
async fn rejected_mongodb_credentials_are_reported_at_once_without_the_password() {
    let target = Target::new("mongo_auth");
    let db = target.db().await;
    let user = format!("u_{}", target.database);
    // A user of the test's database. DocumentDB grants no role of one
    // database (code 31 RoleNotFound): there it is a reader of every
    // database, kept in `admin` — all this test needs is a password.
    let created = db
        .run_command(doc! {
            "createUser": &user,
            "pwd": "right-pass-1234",
            "roles": [{ "role": "readWrite", "db": &target.database }],
        })
        .await;
    let (users_db, auth_db) = match created {
        Ok(_) => (db.clone(), target.database.clone()),
        Err(error) if matches!(&*error.kind, ErrorKind::Command(c) if c.code == 31) => {
            let admin = db.client().database("admin");
            admin
                .run_command(doc! {
                    "createUser": &user,
                    "pwd": "right-pass-1234",
                    "roles": [{ "role": "readAnyDatabase", "db": "admin" }],
                })
                .await
                .expect("createUser in admin");
            (admin, "admin".to_string())
        }
        Err(error) => panic!("createUser: {error}"),
    };

    // The server checks passwords: the right one gets in, the wrong one not.
    let right = support::server::uri_with_credentials(
        &target.mongo_uri,
        &user,
        "right-pass-1234",
        &auth_db,
    );
    let client = mongodb::Client::with_uri_str(&right).await.unwrap();
    client
        .database(&target.database)
        .run_command(doc! { "ping": 1 })
        .await
        .expect("the right password is accepted");
    let wrong = support::server::uri_with_credentials(
        &target.mongo_uri,
        &user,
        "wrong-pass-do-not-print",
        &auth_db,
    );

    // `once` retries an unreachable server five times, logging each retry;
    // rejected credentials it reports after the first attempt.
    let out = target.clone().with_mongo(&wrong).run("auth", &["once"]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Before asserting: the user outlives its database.
    users_db
        .run_command(doc! { "dropUser": &user })
        .await
        .expect("dropUser");
    target.cleanup().await;

    assert_eq!(out.status.code(), Some(4), "{all}");
    assert_eq!(
        all.matches("not reachable yet").count(),
        0,
        "rejected credentials are not retried: {all}"
    );
    assert!(all.contains("credentials were rejected"), "{all}");
    assert!(all.contains("authentication failed"), "{all}");
    assert!(all.contains("MONGO_URI"), "{all}");
    assert!(!all.contains("do-not-print"), "{all}");
}
