//! What the command line prints for an operator to read: the text of the
//! engine's data, one file per command output. The engine's types stay
//! plain data; their `Display` lives here, above them (this module imports
//! `lease`, `follow` and `views`; none of them imports it).
//!
//! - [`status`]: `status` — the lease, the mode, the chat collections.

pub mod status;
