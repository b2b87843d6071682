//! The servers every benchmark binary talks to (`meili-bench`,
//! `meili-bench-follow`, `meili-bench-expiry`): one set of flags, read from
//! the same environment variables as the tests, secrets hidden from `--help`.

// MongoDB and Meilisearch, as flags or environment variables (a plain
// comment: a doc comment here would become the about text of a binary
// whose own `Args` has none).
#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    /// MongoDB connection string.
    #[arg(long, env = "MONGO_URI", hide_env_values = true)]
    pub mongo_uri: String,
    /// Meilisearch URL.
    #[arg(long, env = "MEILI_HOST")]
    pub meili_host: String,
    /// Meilisearch master key.
    #[arg(
        long,
        env = "MEILI_MASTER_KEY",
        hide_env_values = true,
        default_value = ""
    )]
    pub meili_key: String,
}
