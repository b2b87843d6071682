//! Busy CPU time for `meili-bench` (and, through its `cpu` command, for
//! `scripts/bench-sync` around `once`): how much work a pass made the machine
//! do, to compare with the limit docs/benchmarks.md defines ("Method").
//!
//! Two counts per snapshot: the whole machine's busy time from `/proc/stat`
//! (user + nice + system + irq + softirq + steal, every core: the figure the
//! limit is defined on), and the CPU time of named processes (the servers we
//! started, and this process) from `/proc/<pid>/stat`, which other work on a
//! shared machine cannot inflate. Both in clock ticks (`getconf CLK_TCK`).

use std::time::Instant;

use anyhow::{bail, Context};
use serde_json::{json, Value};

/// Counters at one instant.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot {
    at: Instant,
    /// Busy ticks of all cores since boot.
    system_busy: u64,
    /// CPU ticks (user + system) of the watched processes and of this one.
    processes: u64,
}

/// Busy ticks of all cores since boot, from the first (`cpu `) line of `/proc/stat`.
fn system_busy() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat
        .lines()
        .find(|line| line.starts_with("cpu "))
        .context("/proc/stat has no `cpu` line")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    if fields.len() < 8 {
        bail!("/proc/stat: unexpected `cpu` line {line:?}");
    }
    // user nice system idle iowait irq softirq steal (guest is within user).
    Ok(fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7])
}

/// User + system ticks of process `pid` (`self` for this one); 0 once it is gone.
fn process_ticks(pid: &str) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the command name (which may hold spaces) start at `state`,
    // field 3 of proc(5): utime is field 14, stime field 15.
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    ticks(11).unwrap_or(0) + ticks(12).unwrap_or(0)
}

/// The counters now, for the processes `pids` plus this one.
pub fn snapshot(pids: &[u32]) -> anyhow::Result<Snapshot> {
    let processes = pids
        .iter()
        .map(|pid| process_ticks(&pid.to_string()))
        .sum::<u64>()
        + process_ticks("self");
    Ok(Snapshot {
        at: Instant::now(),
        system_busy: system_busy()?,
        processes,
    })
}

/// What happened between two snapshots.
#[derive(Clone, Copy, Debug)]
pub struct Spent {
    pub secs: f64,
    /// Busy core-seconds of the whole machine.
    pub busy_cpu_s: f64,
    /// Core-seconds of the watched processes and this one.
    pub own_cpu_s: f64,
}

impl Spent {
    pub fn between(start: &Snapshot, end: &Snapshot, clock_ticks: u64) -> Self {
        let per_tick = 1.0 / clock_ticks.max(1) as f64;
        Spent {
            secs: end.at.duration_since(start.at).as_secs_f64(),
            busy_cpu_s: end.system_busy.saturating_sub(start.system_busy) as f64 * per_tick,
            own_cpu_s: end.processes.saturating_sub(start.processes) as f64 * per_tick,
        }
    }

    pub fn to_json(self) -> Value {
        json!({ "secs": self.secs, "busy_cpu_s": self.busy_cpu_s, "own_cpu_s": self.own_cpu_s })
    }
}

/// A snapshot as JSON (`meili-bench cpu`), ticks as they are.
pub fn snapshot_json(pids: &[u32]) -> anyhow::Result<Value> {
    let snap = snapshot(pids)?;
    // This short-lived process's own ticks are not part of what is measured.
    let own = process_ticks("self");
    Ok(json!({
        "system_busy_ticks": snap.system_busy,
        "process_ticks": snap.processes - own.min(snap.processes),
    }))
}
