//! The integration tests, one module per behaviour (`tests/<module>.rs`), in
//! one test binary: a binary per file would be some 50 links a build. A
//! test's name is `<module>::<test>`, so
//!
//! ```text
//! scripts/test --test suite -- lease_protocol::
//! ```
//!
//! runs the tests of `tests/lease_protocol.rs`. The tests of every module run
//! on the threads of this one process: anything process-wide a test asserts
//! on belongs in `tests/process_wide.rs` instead.

mod support;

mod cli;
mod cli_modes;
mod compose_file;
mod config_layers;
mod config_reference;
mod deletes_around_a_run;
mod deploy_manifests;
mod design_doc;
mod docs_samples;
mod exact_in_flight_changes;
mod exact_partitions;
mod exact_skewed_writers;
mod expiry;
mod follow_changes;
mod follow_deletes;
mod follow_pipeline;
mod follow_server_limits;
mod follow_takeover;
mod forced_run_deletes;
mod head_start;
mod lease_follow;
mod lease_processes;
mod lease_protocol;
mod lease_replica_set;
mod librechat_interplay;
mod librechat_parity;
mod meili_contract;
mod meili_scoped_key;
mod meili_standin_model;
mod mongo_connection_closed;
mod mongo_credentials;
mod mongo_indexable_predicate;
mod once_processes;
mod reader_waits_for_room;
mod reconcile_concurrent_edit;
mod reconcile_counts_partition;
mod reconcile_drift_race;
mod reconcile_end_to_end;
mod reconcile_idempotence;
mod reconcile_many_changed_in_flight;
mod reconcile_outage;
mod reconcile_plan_is_read_only;
mod reconcile_poison;
mod reconcile_rebuild;
mod reconcile_settings_first;
mod reconcile_side_by_side;
mod reindex_crash_recovery;
mod reindex_in_place;
mod reindex_keeps_search_answering;
mod reindex_kill_at_each_step;
mod reindex_rejects;
mod run_mode;
mod seeder;
mod start_notices;
mod sync_ack_handoff;
mod sync_read_paths;
mod verify_command;
