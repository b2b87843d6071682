//! deploy/: the Kubernetes manifests beside LibreChat's Helm chart, the
//! Prometheus alert rules and the Grafana dashboard, checked against the
//! real things:
//!
//! - every manifest deploy/kubernetes/kustomization.yaml lists validates as
//!   Kubernetes 1.29 to 1.37 resources (strict: no unknown field), offline,
//!   against the JSON schemas packaged in `kubernetes-validate`; the alert
//!   rules are a ConfigMap, so no CRD schema is needed; the kustomization
//!   builds exactly the manifests of its directory (`kubectl kustomize`);
//! - the port the service listens on, its ConfigMap loaded as the service
//!   loads its settings, is on every interface and is the port of the probes,
//!   the Service and the scrape annotation;
//! - every probe, scrape and healthcheck path is a route `run` serves: the
//!   real binary, against the test servers;
//! - the alert rules pass `promtool check rules` and each fires on the series
//!   it describes (`promtool test rules`); they and the dashboard's queries
//!   name only metrics src/metrics.rs defines, and only labels and label
//!   values a running `run` exports.
//!
//! The validators are pinned and installed by `scripts/test-servers tools`
//! (and by `start`, which `scripts/test` runs) into .test-servers/tools/;
//! without them these tests fail, naming that command.

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use yaml_rust2::{Yaml, YamlEmitter, YamlLoader};

use meili_reconciler::config::{self, known_keys, Sources, ENV_PREFIX, LIBRECHAT_VARS};
use promql_parser::parser::{self as promql, Expr, LabelModifier, VectorSelector};
use support::cli::{eventually, free_port, terminate, wait_exit, Target};

const KUBERNETES_DIR: &str = "deploy/kubernetes";
const ALERTS: &str = "deploy/prometheus/alerts.yml";
const DASHBOARD: &str = "deploy/grafana/dashboard.json";
const METRICS_SOURCE: &str = "src/metrics.rs";
const LIBRECHAT_OVERRIDE: &str = "deploy/librechat/docker-compose.override.yml";

/// The Kubernetes versions the manifests must validate against: podFailurePolicy
/// as written (onExitCodes alone) is valid from 1.29; 1.37 is the newest the
/// pinned kubernetes-validate ships.
const KUBERNETES_VERSIONS: &[&str] = &[
    "1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0",
];

/// The ConfigMap of the service's own settings.
const SETTINGS_CONFIGMAP: &str = "meili-reconciler-config";

/// Labels Prometheus adds to every scraped series (the service exports neither).
const TARGET_LABELS: &[&str] = &["job", "instance"];

// --- files ---------------------------------------------------------------------

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml_docs(text: &str, what: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(text).unwrap_or_else(|e| panic!("{what} is not valid YAML: {e}"))
}

fn yaml_file(path: &str) -> Yaml {
    let mut docs = yaml_docs(&read(path), path);
    assert_eq!(docs.len(), 1, "{path}: one YAML document");
    docs.remove(0)
}

fn str_of<'a>(node: &'a Yaml, what: &str) -> &'a str {
    node.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, got {node:?}"))
}

fn int_of(node: &Yaml, what: &str) -> i64 {
    node.as_i64()
        .unwrap_or_else(|| panic!("{what}: expected an integer, got {node:?}"))
}

fn list_of<'a>(node: &'a Yaml, what: &str) -> &'a Vec<Yaml> {
    node.as_vec()
        .unwrap_or_else(|| panic!("{what}: expected a list, got {node:?}"))
}

/// The manifest files the kustomization lists, in its order.
fn manifest_files() -> Vec<String> {
    let kustomization = yaml_file(&format!("{KUBERNETES_DIR}/kustomization.yaml"));
    list_of(&kustomization["resources"], "kustomization resources")
        .iter()
        .map(|r| format!("{KUBERNETES_DIR}/{}", str_of(r, "a resource")))
        .collect()
}

/// Every manifest, parsed, with its file.
fn manifests() -> Vec<(String, Yaml)> {
    manifest_files()
        .into_iter()
        .map(|file| {
            let doc = yaml_file(&file);
            (file, doc)
        })
        .collect()
}

/// The one resource of `kind` named `name`.
fn resource(kind: &str, name: &str) -> Yaml {
    let found: Vec<Yaml> = manifests()
        .into_iter()
        .map(|(_, doc)| doc)
        .filter(|doc| {
            doc["kind"].as_str() == Some(kind) && doc["metadata"]["name"].as_str() == Some(name)
        })
        .collect();
    assert_eq!(found.len(), 1, "exactly one {kind} {name} in the manifests");
    found.into_iter().next().unwrap()
}

fn only_resource(kind: &str) -> Yaml {
    let found: Vec<Yaml> = manifests()
        .into_iter()
        .map(|(_, doc)| doc)
        .filter(|doc| doc["kind"].as_str() == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "exactly one {kind} in the manifests");
    found.into_iter().next().unwrap()
}

/// The one container of a Deployment's or Job's pod template.
fn container(workload: &Yaml) -> &Yaml {
    let containers = list_of(
        &workload["spec"]["template"]["spec"]["containers"],
        "containers",
    );
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// A ConfigMap's data, as strings.
fn configmap_data(configmap: &Yaml) -> BTreeMap<String, String> {
    configmap["data"]
        .as_hash()
        .expect("ConfigMap data")
        .iter()
        .map(|(k, v)| {
            (
                str_of(k, "a data key").to_string(),
                str_of(v, "a data value").to_string(),
            )
        })
        .collect()
}

// --- tools ---------------------------------------------------------------------

/// A validator: the pinned one in .test-servers/tools/ (`relative`), else one
/// on PATH; a test that needs it fails without it.
fn tool(name: &str, relative: &str) -> PathBuf {
    let pinned = repo(".test-servers/tools").join(relative);
    if pinned.is_file() {
        return pinned;
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "{name} is not installed, so deploy/ cannot be validated: run `scripts/test-servers tools` \
             (it installs the pinned {name} into .test-servers/tools/; `scripts/test` does so itself), \
             or put a {name} on PATH"
        )
    })
}

fn kubernetes_validate() -> PathBuf {
    tool("kubernetes-validate", "venv/bin/kubernetes-validate")
}

fn promtool() -> PathBuf {
    tool("promtool", "bin/promtool")
}

fn kubectl() -> PathBuf {
    tool("kubectl", "bin/kubectl")
}

fn run_tool(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

fn text_of(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

// --- metrics -------------------------------------------------------------------

/// The metric families src/metrics.rs defines (its `pub const NAME: &str =
/// "reconciler_…"` lines), and which of them are histograms (described with
/// `describe_histogram!`).
struct Exported {
    families: BTreeSet<String>,
    histograms: BTreeSet<String>,
}

impl Exported {
    fn from_source() -> Self {
        let source = read(METRICS_SOURCE);
        let mut by_const = HashMap::new();
        for line in source.lines() {
            let line = line.trim();
            let Some(rest) = ["pub const ", "pub(crate) const ", "const "]
                .iter()
                .find_map(|visibility| line.strip_prefix(visibility))
            else {
                continue;
            };
            let Some((name, value)) = rest.split_once(": &str = \"") else {
                continue;
            };
            let value = value.trim_end_matches("\";");
            if value.starts_with("reconciler_") {
                by_const.insert(name.to_string(), value.to_string());
            }
        }
        assert!(
            by_const.len() >= 10,
            "metric names found in {METRICS_SOURCE}: {by_const:?}"
        );
        let histograms: BTreeSet<String> = source
            .split("describe_histogram!(")
            .skip(1)
            .map(|rest| {
                let name: String = rest
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                by_const
                    .get(&name)
                    .unwrap_or_else(|| panic!("histogram {name} is not a metric name constant"))
                    .clone()
            })
            .collect();
        assert!(
            !histograms.is_empty(),
            "no histogram found in {METRICS_SOURCE}"
        );
        Exported {
            families: by_const.into_values().collect(),
            histograms,
        }
    }

    /// The family a series name belongs to: a histogram's series are its
    /// `_bucket`, `_sum` and `_count`, never the bare name.
    fn family_of(&self, series: &str) -> Option<String> {
        for histogram in &self.histograms {
            for suffix in ["_bucket", "_sum", "_count"] {
                if series.strip_suffix(suffix) == Some(histogram.as_str()) {
                    return Some(histogram.clone());
                }
            }
        }
        (self.families.contains(series) && !self.histograms.contains(series))
            .then(|| series.to_string())
    }
}

// --- PromQL --------------------------------------------------------------------

/// A vector selector: the series name and its label matchers
/// (label, operator as written, value).
#[derive(Debug)]
struct Selector {
    name: String,
    matchers: Vec<(String, String, String)>,
}

/// What a PromQL expression selects: its vector selectors, and the labels of
/// its `by`, `without`, `on`, `ignoring` and `group_*` clauses.
#[derive(Debug, Default)]
struct Selection {
    selectors: Vec<Selector>,
    grouping: Vec<String>,
}

/// Parses `expr` (Grafana's variables replaced by values) with Prometheus'
/// grammar and collects what it selects.
fn analyse(expr: &str) -> Selection {
    let plain = without_grafana_variables(expr);
    let parsed = promql::parse(&plain).unwrap_or_else(|e| panic!("not PromQL: {e}: {expr}"));
    let mut selection = Selection::default();
    collect(&parsed, &mut selection, expr);
    selection
}

fn collect(node: &Expr, into: &mut Selection, expr: &str) {
    let labels = |modifier: &LabelModifier| modifier.labels().labels.clone();
    match node {
        Expr::VectorSelector(vs) => into.selectors.push(selector(vs, expr)),
        Expr::MatrixSelector(ms) => into.selectors.push(selector(&ms.vs, expr)),
        Expr::Aggregate(agg) => {
            into.grouping
                .extend(agg.modifier.as_ref().map(labels).unwrap_or_default());
            if let Some(param) = &agg.param {
                collect(param, into, expr);
            }
            collect(&agg.expr, into, expr);
        }
        Expr::Binary(bin) => {
            if let Some(modifier) = &bin.modifier {
                into.grouping
                    .extend(modifier.matching.as_ref().map(labels).unwrap_or_default());
                into.grouping.extend(
                    modifier
                        .card
                        .labels()
                        .map(|l| l.labels.clone())
                        .unwrap_or_default(),
                );
            }
            collect(&bin.lhs, into, expr);
            collect(&bin.rhs, into, expr);
        }
        Expr::Unary(u) => collect(&u.expr, into, expr),
        Expr::Paren(p) => collect(&p.expr, into, expr),
        Expr::Subquery(q) => collect(&q.expr, into, expr),
        Expr::Call(call) => call
            .args
            .args
            .iter()
            .for_each(|arg| collect(arg, into, expr)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

fn selector(vs: &VectorSelector, expr: &str) -> Selector {
    Selector {
        name: vs
            .name
            .clone()
            .unwrap_or_else(|| panic!("a selector without a metric name in {expr}")),
        matchers: vs
            .matchers
            .matchers
            .iter()
            .map(|m| (m.name.clone(), m.op.to_string(), m.value.clone()))
            .collect(),
    }
}

/// The series names an expression selects, each checked to be one the
/// service exports (or Prometheus' own `up` where `allow_up`).
fn assert_only_exported(
    exported: &Exported,
    expr: &str,
    allow_up: bool,
    what: &str,
) -> BTreeSet<String> {
    let selection = analyse(expr);
    assert!(
        !selection.selectors.is_empty(),
        "{what}: selects no series: {expr}"
    );
    let mut families = BTreeSet::new();
    for selector in &selection.selectors {
        if allow_up && selector.name == "up" {
            continue;
        }
        let family = exported.family_of(&selector.name).unwrap_or_else(|| {
            panic!(
                "{what}: `{}` is not a metric {METRICS_SOURCE} defines (families: {:?}; histograms as _bucket/_sum/_count: {:?}) in {expr}",
                selector.name, exported.families, exported.histograms
            )
        });
        families.insert(family);
    }
    families
}

// --- alert rules and dashboard ---------------------------------------------------

struct Rule {
    alert: String,
    expr: String,
    node: Yaml,
}

fn alert_rules() -> Vec<Rule> {
    let rules = yaml_file(ALERTS);
    let mut out = vec![];
    for group in list_of(&rules["groups"], "groups") {
        for rule in list_of(&group["rules"], "rules") {
            out.push(Rule {
                alert: str_of(&rule["alert"], "alert").to_string(),
                expr: str_of(&rule["expr"], "expr").to_string(),
                node: rule.clone(),
            });
        }
    }
    assert!(!out.is_empty(), "{ALERTS} has no rules");
    out
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"))
}

/// Every panel of the dashboard (rows' nested panels included) but rows.
fn dashboard_panels(dashboard: &Value) -> Vec<Value> {
    let mut out = vec![];
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            out.extend(panel["panels"].as_array().cloned().unwrap_or_default());
        } else {
            out.push(panel.clone());
        }
    }
    out
}

/// (panel title, refId, expr) of every query of the dashboard.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String, String)> {
    let mut out = vec![];
    for panel in dashboard_panels(dashboard) {
        let title = panel["title"].as_str().unwrap_or("<untitled>").to_string();
        let targets = panel["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {title}: no targets"));
        assert!(!targets.is_empty(), "panel {title}: no targets");
        for target in targets {
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {title}: a target without expr"));
            let ref_id = target["refId"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {title}: no refId"));
            out.push((title.clone(), ref_id.to_string(), expr.to_string()));
        }
    }
    out
}

/// The metric of a `label_values(METRIC, label)` variable query.
fn label_values_metric(query: &str) -> String {
    let inner = query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .unwrap_or_else(|| panic!("variable query {query}: expected label_values(metric, label)"));
    let (metric, _label) = inner
        .split_once(',')
        .unwrap_or_else(|| panic!("variable query {query}: expected label_values(metric, label)"));
    metric.trim().to_string()
}

/// A dashboard query as plain PromQL: Grafana's variables replaced by values.
fn without_grafana_variables(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "6h")
        .replace("$job", "meili-reconciler")
}

fn emit_yaml(doc: &Yaml) -> String {
    let mut out = String::new();
    YamlEmitter::new(&mut out).dump(doc).expect("emit YAML");
    out
}

fn yaml_hash(entries: Vec<(&str, Yaml)>) -> Yaml {
    let mut hash = yaml_rust2::yaml::Hash::new();
    for (k, v) in entries {
        hash.insert(Yaml::String(k.to_string()), v);
    }
    Yaml::Hash(hash)
}

fn yaml_str(s: &str) -> Yaml {
    Yaml::String(s.to_string())
}

// --- the tests -------------------------------------------------------------------

#[test]
fn every_manifest_validates_against_the_kubernetes_schemas_offline() {
    let validator = kubernetes_validate();
    let files = manifest_files();
    let mut args = vec!["--strict"];
    for version in KUBERNETES_VERSIONS {
        args.extend(["-k", version]);
    }
    args.extend(files.iter().map(String::as_str));
    let output = run_tool(&validator, &args);
    let text = text_of(&output);
    assert!(
        output.status.success(),
        "kubernetes-validate --strict failed:\n{text}"
    );
    // Each file, each version: validated, not passed over (an unknown kind
    // or a missing schema is no pass).
    let passed = text
        .lines()
        .filter(|l| l.contains(" passed for resource "))
        .count();
    assert_eq!(
        passed,
        files.len() * KUBERNETES_VERSIONS.len(),
        "one pass per manifest and Kubernetes version:\n{text}"
    );
}

#[test]
fn the_kustomization_builds_exactly_the_manifests_of_its_directory() {
    let listed: BTreeSet<String> = manifest_files().into_iter().collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(repo(KUBERNETES_DIR))
        .expect("deploy/kubernetes")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| (n.ends_with(".yaml") || n.ends_with(".yml")) && n != "kustomization.yaml")
        .map(|n| format!("{KUBERNETES_DIR}/{n}"))
        .collect();
    assert_eq!(
        listed, on_disk,
        "kustomization.yaml lists every manifest of its directory"
    );

    let output = run_tool(&kubectl(), &["kustomize", KUBERNETES_DIR]);
    let text = text_of(&output);
    assert!(output.status.success(), "kubectl kustomize failed:\n{text}");
    let built = yaml_docs(&String::from_utf8_lossy(&output.stdout), "kustomize output");
    let key = |doc: &Yaml| {
        format!(
            "{}/{}",
            str_of(&doc["kind"], "kind"),
            str_of(&doc["metadata"]["name"], "metadata.name")
        )
    };
    let built_keys: BTreeSet<String> = built.iter().map(key).collect();
    let file_keys: BTreeSet<String> = manifests().iter().map(|(_, doc)| key(doc)).collect();
    assert_eq!(
        built_keys, file_keys,
        "the build holds exactly the manifests"
    );

    // Its `images:` entry is the one place to point both workloads at a
    // registry: a copy of the directory with another name and tag builds
    // with them in both.
    let kustomization = read(&format!("{KUBERNETES_DIR}/kustomization.yaml"));
    let images = list_of(
        &yaml_docs(&kustomization, "kustomization.yaml")[0]["images"],
        "images",
    )
    .clone();
    assert_eq!(images.len(), 1, "one image");
    let (new_name, new_tag) = (
        str_of(&images[0]["newName"], "newName"),
        str_of(&images[0]["newTag"], "newTag"),
    );
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo(KUBERNETES_DIR)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
    }
    let moved = kustomization
        .replacen(
            &format!("newName: {new_name}\n"),
            "newName: registry.example/team/meili-reconciler\n",
            1,
        )
        .replacen(&format!("newTag: {new_tag}\n"), "newTag: v9.9.9\n", 1);
    assert_ne!(moved, kustomization, "the image's newName and newTag lines");
    std::fs::write(copy.path().join("kustomization.yaml"), moved).unwrap();
    let output = run_tool(&kubectl(), &["kustomize", copy.path().to_str().unwrap()]);
    assert!(
        output.status.success(),
        "kubectl kustomize (another image) failed:\n{}",
        text_of(&output)
    );
    let rebuilt = yaml_docs(&String::from_utf8_lossy(&output.stdout), "kustomize output");
    let mut workloads = 0;
    for doc in rebuilt
        .iter()
        .filter(|d| matches!(d["kind"].as_str(), Some("Deployment" | "Job")))
    {
        assert_eq!(
            str_of(&container(doc)["image"], "image"),
            "registry.example/team/meili-reconciler:v9.9.9",
            "{}",
            key(doc)
        );
        workloads += 1;
    }
    assert_eq!(workloads, 2, "the run Deployment and the once Job");
}

#[test]
fn probes_service_and_scrape_use_the_port_the_service_listens_on_everywhere() {
    // The service's settings as the pod gets them: its ConfigMap, over the
    // servers and key LibreChat's ConfigMap and Secret supply.
    let data = configmap_data(&resource("ConfigMap", SETTINGS_CONFIGMAP));
    let known = known_keys();
    for name in data.keys() {
        let key = name
            .strip_prefix(&format!("{ENV_PREFIX}__"))
            .map(|rest| rest.to_lowercase().replacen("__", ".", 1));
        assert!(
            key.as_ref().is_some_and(|k| known.contains(k))
                || LIBRECHAT_VARS.iter().any(|(v, _)| *v == name.as_str()),
            "{SETTINGS_CONFIGMAP}: {name} is not a setting of the service"
        );
    }
    let mut env: HashMap<String, String> = data.into_iter().collect();
    env.insert(
        "MONGO_URI".into(),
        "mongodb://librechat-mongodb:27017/LibreChat".into(),
    );
    env.insert(
        "MEILI_HOST".into(),
        "http://librechat-meilisearch:7700".into(),
    );
    env.insert(
        "MEILI_MASTER_KEY".into(),
        "a-key-of-at-least-16-bytes".into(),
    );
    let settings = config::load(&Sources {
        // The image's working directory holds config/default.toml as here.
        base_dir: Some(repo("")),
        config_file: None,
        env,
    })
    .unwrap_or_else(|e| panic!("{SETTINGS_CONFIGMAP} does not load: {e}"));
    let listen = settings.serve.listen;
    assert!(
        listen.ip().is_unspecified(),
        "serve.listen must take connections from outside the pod, got {listen}"
    );
    let port = i64::from(listen.port());

    let deployment = only_resource("Deployment");
    let run = container(&deployment);
    let named_ports: HashMap<String, i64> = list_of(&run["ports"], "ports")
        .iter()
        .map(|p| {
            (
                str_of(&p["name"], "port name").to_string(),
                int_of(&p["containerPort"], "containerPort"),
            )
        })
        .collect();
    let resolve = |node: &Yaml, what: &str| match node {
        Yaml::Integer(n) => *n,
        Yaml::String(name) => *named_ports
            .get(name)
            .unwrap_or_else(|| panic!("{what}: no container port named {name}")),
        other => panic!("{what}: unexpected port {other:?}"),
    };
    assert_eq!(
        named_ports.values().copied().collect::<Vec<_>>(),
        vec![port],
        "the container's one port"
    );
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let get = &run[probe]["httpGet"];
        assert!(!get.is_badvalue(), "{probe} is an HTTP GET");
        assert_eq!(resolve(&get["port"], probe), port, "{probe} port");
    }
    // The service's own settings come last, so they win over LibreChat's.
    let env_from = list_of(&run["envFrom"], "envFrom");
    assert_eq!(
        env_from.last().map(|e| &e["configMapRef"]["name"]),
        Some(&yaml_str(SETTINGS_CONFIGMAP)),
        "{SETTINGS_CONFIGMAP} is the last envFrom source"
    );

    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(
        annotations["prometheus.io/port"]
            .as_str()
            .and_then(|p| p.parse::<i64>().ok()),
        Some(port),
        "scrape annotation port"
    );

    let service = only_resource("Service");
    let service_ports = list_of(&service["spec"]["ports"], "Service ports");
    assert_eq!(service_ports.len(), 1);
    assert_eq!(
        resolve(&service_ports[0]["targetPort"], "Service targetPort"),
        port
    );
    let pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        .as_hash()
        .unwrap();
    for (k, v) in service["spec"]["selector"]
        .as_hash()
        .expect("Service selector")
    {
        assert_eq!(
            pod_labels.get(k),
            Some(v),
            "the Service selects the run pods ({k:?})"
        );
    }

    // A pod stopped is given the service's grace for its work, 5 s for the
    // HTTP server, and more.
    for workload in [&deployment, &only_resource("Job")] {
        let grace = int_of(
            &workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
            "terminationGracePeriodSeconds",
        );
        assert!(
            grace as u64 > settings.serve.grace.as_secs() + 5,
            "terminationGracePeriodSeconds {grace} leaves no room beyond serve.grace {:?}",
            settings.serve.grace
        );
    }

    // The other kits serve on the same port.
    let dockerfile = read("Dockerfile");
    assert!(
        dockerfile.contains(&format!("EXPOSE {port}\n")),
        "Dockerfile EXPOSE {port}"
    );
    assert!(
        dockerfile.contains(&format!("RECONCILER__SERVE__LISTEN=0.0.0.0:{port}\n")),
        "Dockerfile listens on {port}"
    );
    assert!(
        read(LIBRECHAT_OVERRIDE).contains(&format!("RECONCILER__SERVE__LISTEN: 0.0.0.0:{port}\n")),
        "{LIBRECHAT_OVERRIDE} listens on {port}"
    );
}

#[test]
fn the_workloads_run_the_commands_as_the_image_user_with_arguments_the_binary_accepts() {
    let deployment = only_resource("Deployment");
    let job = only_resource("Job");
    let binary = env!("CARGO_BIN_EXE_meili-reconciler");
    let accepts = |args: &[&str]| {
        let mut with_help: Vec<&str> = args.to_vec();
        with_help.push("--help");
        Command::new(binary)
            .args(&with_help)
            .output()
            .expect("run meili-reconciler")
            .status
            .success()
    };
    // The check can fail: an unknown flag before --help is an error.
    assert!(!accepts(&["once", "--no-such-flag"]));

    let args = |workload: &Yaml| -> Vec<String> {
        list_of(&container(workload)["args"], "args")
            .iter()
            .map(|a| str_of(a, "an argument").to_string())
            .collect()
    };
    let run_args = args(&deployment);
    assert_eq!(run_args, vec!["run"]);
    let once_args = args(&job);
    assert_eq!(once_args.first().map(String::as_str), Some("once"));
    for command in [&run_args, &once_args] {
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        assert!(accepts(&command), "meili-reconciler refuses {command:?}");
    }

    // The Job: never restarted in place, retried a bounded number of times
    // (not on exit 2, bad configuration), and its deadline past the wait.
    let spec = &job["spec"];
    assert_eq!(
        spec["template"]["spec"]["restartPolicy"].as_str(),
        Some("Never")
    );
    assert!(int_of(&spec["backoffLimit"], "backoffLimit") >= 1);
    let wait = once_args
        .iter()
        .position(|a| a == "--wait-timeout")
        .map(|i| humantime::parse_duration(&once_args[i + 1]).expect("a --wait-timeout duration"))
        .expect("once is given --wait-timeout");
    let deadline = int_of(&spec["activeDeadlineSeconds"], "activeDeadlineSeconds") as u64;
    assert!(
        deadline > wait.as_secs(),
        "activeDeadlineSeconds {deadline} within --wait-timeout {wait:?}"
    );
    let rules = list_of(&spec["podFailurePolicy"]["rules"], "podFailurePolicy rules");
    let fail_job_on: Vec<i64> = rules
        .iter()
        .filter(|r| r["action"].as_str() == Some("FailJob"))
        .flat_map(|r| {
            list_of(&r["onExitCodes"]["values"], "onExitCodes")
                .iter()
                .map(|v| int_of(v, "exit code"))
        })
        .collect();
    assert_eq!(
        fail_job_on,
        vec![2],
        "only bad configuration (exit 2) fails the Job at once"
    );

    // Both: the image's unprivileged user, a read-only root file system, the
    // same settings.
    let dockerfile = read("Dockerfile");
    let uid: i64 = dockerfile
        .split("--uid ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|uid| uid.parse().ok())
        .expect("the Dockerfile creates its user with --uid");
    for (what, workload) in [("Deployment", &deployment), ("Job", &job)] {
        let pod = &workload["spec"]["template"]["spec"];
        assert_eq!(
            pod["securityContext"]["runAsNonRoot"].as_bool(),
            Some(true),
            "{what}"
        );
        assert_eq!(
            pod["securityContext"]["runAsUser"].as_i64(),
            Some(uid),
            "{what}: the image's user"
        );
        let security = &container(workload)["securityContext"];
        assert_eq!(
            security["readOnlyRootFilesystem"].as_bool(),
            Some(true),
            "{what}"
        );
        assert_eq!(
            security["allowPrivilegeEscalation"].as_bool(),
            Some(false),
            "{what}"
        );
    }
    assert_eq!(
        container(&deployment)["envFrom"],
        container(&job)["envFrom"],
        "run and once read the same ConfigMaps and Secret"
    );
    assert_eq!(container(&deployment)["image"], container(&job)["image"]);
}

/// Starts `run` against the test servers on a free port; returns it with its
/// base URL once it answers /healthz.
async fn start_run(tag: &str) -> (Target, support::cli::Replica, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let target = Target::new(tag)
        .set("RECONCILER__SERVE__LISTEN", &listen)
        .set("RECONCILER__SERVE__INTERVAL", "1h");
    let replica = target.spawn(tag, &["run"]);
    let base = format!("http://{listen}");
    let url = format!("{base}/healthz");
    eventually(
        Duration::from_secs(60),
        "run answering /healthz",
        || async {
            let response = reqwest::get(&url).await.ok()?;
            response.status().is_success().then_some(())
        },
    )
    .await;
    (target, replica, base)
}

async fn stop_run(target: Target, mut replica: support::cli::Replica) {
    terminate(&replica);
    let status = wait_exit(&mut replica, Duration::from_secs(60));
    assert!(status.success(), "run exits 0 after SIGTERM: {status:?}");
    target.cleanup().await;
}

/// The paths of URLs in a text (`http://host:port/path`).
fn url_paths(text: &str) -> Vec<String> {
    text.split("http://")
        .skip(1)
        .filter_map(|rest| {
            let rest: String = rest
                .chars()
                .take_while(|c| !c.is_whitespace() && !"\"',]".contains(*c))
                .collect();
            rest.find('/').map(|i| rest[i..].to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_probe_scrape_and_healthcheck_path_is_a_route_run_serves() {
    let deployment = only_resource("Deployment");
    let run = container(&deployment);
    let mut paths: Vec<(String, String)> = ["startupProbe", "livenessProbe", "readinessProbe"]
        .iter()
        .map(|probe| {
            (
                format!("deployment {probe}"),
                str_of(&run[*probe]["httpGet"]["path"], probe).to_string(),
            )
        })
        .collect();
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    paths.push((
        "scrape annotation".into(),
        str_of(&annotations["prometheus.io/path"], "prometheus.io/path").to_string(),
    ));
    // Healthchecks of the compose kit, where it has any.
    let compose = yaml_file(LIBRECHAT_OVERRIDE);
    for (name, service) in compose["services"].as_hash().expect("services") {
        let test = &service["healthcheck"]["test"];
        let text = match test {
            Yaml::Array(items) => items
                .iter()
                .filter_map(|i| i.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            Yaml::String(s) => s.clone(),
            _ => continue,
        };
        for path in url_paths(&text) {
            paths.push((
                format!("compose {} healthcheck", name.as_str().unwrap_or("?")),
                path,
            ));
        }
    }
    let live = run["livenessProbe"]["httpGet"]["path"].as_str();
    let ready = run["readinessProbe"]["httpGet"]["path"].as_str();
    assert_eq!(
        (live, ready),
        (Some("/healthz"), Some("/readyz")),
        "liveness on /healthz, readiness on /readyz"
    );

    let (target, replica, base) = start_run("deploy_routes").await;
    let get = |path: String| {
        let url = format!("{base}{path}");
        async move {
            reqwest::get(&url)
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    };
    // The check can fail: a path `run` does not serve is a 404.
    assert_eq!(get("/no-such-route".into()).await, 404);
    for (what, path) in &paths {
        // /readyz answers 200 once both servers answered a probe; they are up.
        let code = eventually(
            Duration::from_secs(30),
            &format!("{what} {path} answering 200"),
            || {
                let path = path.clone();
                let get = &get;
                async move {
                    let code = get(path).await;
                    (code == 200 || code == 404).then_some(code)
                }
            },
        )
        .await;
        assert_eq!(code, 200, "{what}: GET {path} is not a route run serves");
    }
    stop_run(target, replica).await;
}

#[test]
fn the_alert_rules_are_complete_and_pass_promtool() {
    let exported = Exported::from_source();
    let rules = alert_rules();
    let mut names = BTreeSet::new();
    for rule in &rules {
        let what = &rule.alert;
        assert!(names.insert(what.clone()), "alert {what} defined twice");
        assert!(
            what.starts_with("MeiliReconciler"),
            "{what}: alerts are named MeiliReconciler…"
        );
        let wait = str_of(&rule.node["for"], &format!("{what}: for"));
        humantime::parse_duration(wait).unwrap_or_else(|e| panic!("{what}: for {wait}: {e}"));
        let severity = str_of(
            &rule.node["labels"]["severity"],
            &format!("{what}: labels.severity"),
        );
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{what}: severity {severity}"
        );
        let summary = str_of(
            &rule.node["annotations"]["summary"],
            &format!("{what}: summary"),
        );
        let description = str_of(
            &rule.node["annotations"]["description"],
            &format!("{what}: description"),
        );
        assert!(!summary.trim().is_empty(), "{what}: empty summary");
        assert!(
            description.contains("docs/operations.md"),
            "{what}: the description links docs/operations.md"
        );
        assert_only_exported(&exported, &rule.expr, true, what);
    }

    let output = run_tool(&promtool(), &["check", "rules", ALERTS]);
    let text = text_of(&output);
    assert!(
        output.status.success(),
        "promtool check rules {ALERTS}:\n{text}"
    );
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "{text}"
    );

    // The Kubernetes copy is the same file.
    let configmap = resource("ConfigMap", "meili-reconciler-alerts");
    let data = configmap_data(&configmap);
    assert_eq!(data.len(), 1, "one rules file in meili-reconciler-alerts");
    assert!(
        data.values().next() == Some(&read(ALERTS)),
        "deploy/kubernetes/alerts-configmap.yaml must hold {ALERTS} verbatim: copy it there"
    );
}

/// One `promtool test rules` case: input series (1-minute steps), the time
/// to evaluate at, the alert, and the labels of each instance expected to fire
/// (none: the alert must stay quiet).
struct AlertCase {
    alert: &'static str,
    series: Vec<(String, &'static str)>,
    at: &'static str,
    firing: &'static [&'static [(&'static str, &'static str)]],
}

const JOB: (&str, &str) = ("job", "meili-reconciler");

fn alert_cases() -> Vec<AlertCase> {
    // The labels of replica a's series, as Prometheus scrapes them.
    const R: &str = r#"job="meili-reconciler", instance="a:9464""#;
    vec![
        AlertCase {
            alert: "MeiliReconcilerDown",
            series: vec![(format!("up{{{R}}}"), "0x20")],
            at: "10m",
            firing: &[&[JOB, ("instance", "a:9464"), ("severity", "warning")]],
        },
        AlertCase {
            alert: "MeiliReconcilerDown",
            series: vec![(format!("up{{{R}}}"), "1x20")],
            at: "10m",
            firing: &[],
        },
        AlertCase {
            alert: "MeiliReconcilerAbsent",
            series: vec![(format!("up{{{R}}}"), "0x20")],
            at: "10m",
            firing: &[&[("severity", "critical")]],
        },
        AlertCase {
            alert: "MeiliReconcilerAbsent",
            series: vec![(format!("up{{{R}}}"), "1x20")],
            at: "10m",
            firing: &[],
        },
        AlertCase {
            alert: "MeiliReconcilerNoSuccessfulRun",
            series: vec![(format!("reconciler_seconds_since_last_success{{{R}}}"), "3000+60x60")],
            at: "30m",
            firing: &[&[JOB, ("severity", "critical")]],
        },
        // One replica (the owner) succeeding is enough.
        AlertCase {
            alert: "MeiliReconcilerNoSuccessfulRun",
            series: vec![
                (format!("reconciler_seconds_since_last_success{{{R}}}"), "3000+60x60"),
                (
                    r#"reconciler_seconds_since_last_success{job="meili-reconciler", instance="b:9464"}"#.into(),
                    "0+60x4 0+60x4 0+60x4 0+60x4 0+60x4 0+60x4 0+60x4 0+60x4",
                ),
            ],
            at: "30m",
            firing: &[],
        },
        AlertCase {
            alert: "MeiliReconcilerRunFailed",
            series: vec![(format!(r#"reconciler_runs_total{{{R}, outcome="failed"}}"#), "0 0 0 1 1 1 1 1 1 1")],
            at: "8m",
            firing: &[&[JOB, ("severity", "warning")]],
        },
        AlertCase {
            alert: "MeiliReconcilerRunFailed",
            series: vec![
                (format!(r#"reconciler_runs_total{{{R}, outcome="failed"}}"#), "0x10"),
                (format!(r#"reconciler_runs_total{{{R}, outcome="completed"}}"#), "0+1x10"),
            ],
            at: "8m",
            firing: &[],
        },
        AlertCase {
            alert: "MeiliReconcilerServerUnreachable",
            series: vec![(format!(r#"reconciler_runs_total{{{R}, outcome="unreachable"}}"#), "0+1x40")],
            at: "30m",
            firing: &[&[JOB, ("severity", "warning")]],
        },
        AlertCase {
            alert: "MeiliReconcilerLeaseTakeovers",
            series: vec![(format!("reconciler_lease_takeovers_total{{{R}}}"), "0+1x20")],
            at: "10m",
            firing: &[&[JOB, ("severity", "warning")]],
        },
        AlertCase {
            alert: "MeiliReconcilerLeaseTakeovers",
            series: vec![(format!("reconciler_lease_takeovers_total{{{R}}}"), "0 1 1 1 1 1 1 1 1 1 1 1")],
            at: "10m",
            firing: &[],
        },
        AlertCase {
            alert: "MeiliReconcilerLeaseLost",
            series: vec![(format!("reconciler_lease_losses_total{{{R}}}"), "0 0 1 1 1 1 1")],
            at: "5m",
            firing: &[&[JOB, ("severity", "warning")]],
        },
        AlertCase {
            alert: "MeiliReconcilerBacklogNotDraining",
            series: vec![(format!(r#"reconciler_unindexed_documents{{{R}, collection="messages"}}"#), "5000x120")],
            at: "70m",
            firing: &[&[JOB, ("collection", "messages"), ("severity", "warning")]],
        },
        // Draining, or below the threshold: quiet.
        AlertCase {
            alert: "MeiliReconcilerBacklogNotDraining",
            series: vec![
                (format!(r#"reconciler_unindexed_documents{{{R}, collection="messages"}}"#), "50000-100x120"),
                (format!(r#"reconciler_unindexed_documents{{{R}, collection="conversations"}}"#), "500x120"),
            ],
            at: "70m",
            firing: &[],
        },
        AlertCase {
            alert: "MeiliReconcilerDocumentsRejected",
            series: vec![(
                format!(r#"reconciler_documents_rejected_total{{{R}, index="messages"}}"#),
                "0 0 3 3 3 3 3",
            )],
            at: "5m",
            firing: &[&[JOB, ("index", "messages"), ("severity", "warning")]],
        },
        AlertCase {
            alert: "MeiliReconcilerFollowLagHigh",
            series: vec![(format!("reconciler_follow_lag_seconds{{{R}}}"), "120x30")],
            at: "20m",
            firing: &[&[JOB, ("severity", "warning")]],
        },
        AlertCase {
            alert: "MeiliReconcilerFollowLagHigh",
            series: vec![(format!("reconciler_follow_lag_seconds{{{R}}}"), "1x30")],
            at: "20m",
            firing: &[],
        },
        AlertCase {
            alert: "MeiliReconcilerMeilisearchSlow",
            series: vec![
                (format!(r#"reconciler_batch_seconds_bucket{{{R}, le="60"}}"#), "0x60"),
                (format!(r#"reconciler_batch_seconds_bucket{{{R}, le="120"}}"#), "0x60"),
                (format!(r#"reconciler_batch_seconds_bucket{{{R}, le="300"}}"#), "0+1x60"),
                (format!(r#"reconciler_batch_seconds_bucket{{{R}, le="+Inf"}}"#), "0+1x60"),
            ],
            at: "40m",
            firing: &[&[JOB, ("severity", "warning")]],
        },
        AlertCase {
            alert: "MeiliReconcilerFlagWriteRetries",
            series: vec![(format!("reconciler_flag_write_retries_total{{{R}}}"), "0+2x60")],
            at: "40m",
            firing: &[&[JOB, ("severity", "info")]],
        },
    ]
}

#[test]
fn every_alert_fires_on_the_series_it_describes() {
    let rules = alert_rules();
    let cases = alert_cases();
    let with_a_firing_case: BTreeSet<&str> = cases
        .iter()
        .filter(|c| !c.firing.is_empty())
        .map(|c| c.alert)
        .collect();
    let defined: BTreeSet<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    assert_eq!(
        with_a_firing_case, defined,
        "each alert has a case in which it fires"
    );

    // The rules as they are, their annotations aside: promtool compares
    // annotations too, and `check rules` has checked their templates.
    let mut stripped = yaml_file(ALERTS);
    if let Yaml::Hash(root) = &mut stripped {
        for group in root
            .get_mut(&yaml_str("groups"))
            .and_then(|g| g.as_mut_vec())
            .expect("groups")
        {
            if let Yaml::Hash(group) = group {
                for rule in group
                    .get_mut(&yaml_str("rules"))
                    .and_then(|r| r.as_mut_vec())
                    .expect("rules")
                {
                    if let Yaml::Hash(rule) = rule {
                        rule.remove(&yaml_str("annotations"));
                    }
                }
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let rules_file = dir.path().join("alerts.yml");
    std::fs::write(&rules_file, emit_yaml(&stripped)).unwrap();

    let tests: Vec<Yaml> = cases
        .iter()
        .map(|case| {
            let series = case
                .series
                .iter()
                .map(|(series, values)| {
                    yaml_hash(vec![
                        ("series", yaml_str(series)),
                        ("values", yaml_str(values)),
                    ])
                })
                .collect();
            let expected = case
                .firing
                .iter()
                .map(|labels| {
                    let labels = labels.iter().map(|(k, v)| (*k, yaml_str(v))).collect();
                    yaml_hash(vec![("exp_labels", yaml_hash(labels))])
                })
                .collect();
            yaml_hash(vec![
                ("interval", yaml_str("1m")),
                ("input_series", Yaml::Array(series)),
                (
                    "alert_rule_test",
                    Yaml::Array(vec![yaml_hash(vec![
                        ("eval_time", yaml_str(case.at)),
                        ("alertname", yaml_str(case.alert)),
                        ("exp_alerts", Yaml::Array(expected)),
                    ])]),
                ),
            ])
        })
        .collect();
    let test_file = dir.path().join("alerts_test.yml");
    let doc = yaml_hash(vec![
        (
            "rule_files",
            Yaml::Array(vec![yaml_str(rules_file.to_str().unwrap())]),
        ),
        ("evaluation_interval", yaml_str("1m")),
        ("tests", Yaml::Array(tests)),
    ]);
    std::fs::write(&test_file, emit_yaml(&doc)).unwrap();
    let output = run_tool(&promtool(), &["test", "rules", test_file.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "promtool test rules ({} cases):\n{}",
        cases.len(),
        text_of(&output)
    );
}

#[test]
fn the_dashboard_is_grafana_json_showing_every_metric_and_only_those() {
    let exported = Exported::from_source();
    let dashboard = dashboard();
    for field in ["title", "uid"] {
        assert!(
            dashboard[field].as_str().is_some_and(|s| !s.is_empty()),
            "dashboard {field}"
        );
    }
    let all_panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for panel in all_panels.iter().chain(dashboard_panels(&dashboard).iter()) {
        let id = panel["id"].as_i64().expect("every panel has an id");
        ids.insert(id);
        for key in ["h", "w", "x", "y"] {
            assert!(panel["gridPos"][key].is_u64(), "panel {id}: gridPos.{key}");
        }
    }
    let panels = dashboard_panels(&dashboard);
    let rows = all_panels.iter().filter(|p| p["type"] == "row").count();
    assert_eq!(ids.len(), panels.len() + rows, "panel ids are unique");

    // Data source and job variables, and every panel's data source is the variable.
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("variable {name}"))
    };
    assert_eq!(variable("datasource")["type"], "datasource");
    assert_eq!(variable("datasource")["query"], "prometheus");
    let job_query = variable("job")["query"]["query"]
        .as_str()
        .expect("job variable query");
    let metric = label_values_metric(job_query);
    assert!(
        exported.family_of(&metric).is_some(),
        "job variable: {metric} is not a metric"
    );
    for panel in &panels {
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {}",
            panel["title"]
        );
    }

    let queries = dashboard_queries(&dashboard);
    let mut shown = BTreeSet::new();
    for (title, ref_id, expr) in &queries {
        shown.extend(assert_only_exported(
            &exported,
            expr,
            false,
            &format!("panel {title} ({ref_id})"),
        ));
    }
    assert_eq!(
        shown, exported.families,
        "the dashboard shows every metric family {METRICS_SOURCE} defines"
    );

    // Every query is PromQL Prometheus accepts: checked as recording rules.
    let rules: Vec<Yaml> = queries
        .iter()
        .enumerate()
        .map(|(i, (_, _, expr))| {
            yaml_hash(vec![
                ("record", yaml_str(&format!("dashboard:query_{i}"))),
                ("expr", yaml_str(&without_grafana_variables(expr))),
            ])
        })
        .collect();
    let doc = yaml_hash(vec![(
        "groups",
        Yaml::Array(vec![yaml_hash(vec![
            ("name", yaml_str("dashboard")),
            ("rules", Yaml::Array(rules)),
        ])]),
    )]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard_queries.yml");
    std::fs::write(&file, emit_yaml(&doc)).unwrap();
    let output = run_tool(&promtool(), &["check", "rules", file.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "the dashboard's queries, as recording rules, fail promtool check rules:\n{}",
        text_of(&output)
    );
}

/// Label names, and the values of each, per series name of a /metrics scrape.
type Scraped = HashMap<String, HashMap<String, BTreeSet<String>>>;

fn scraped_series(text: &str) -> Scraped {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus text");
    let mut out: Scraped = HashMap::new();
    for sample in &scrape.samples {
        let labels: Vec<(String, String)> = sample
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut add = |name: String, extra: Option<(String, String)>| {
            let entry = out.entry(name).or_default();
            for (k, v) in labels.iter().cloned().chain(extra) {
                entry.entry(k).or_default().insert(v);
            }
        };
        match &sample.value {
            prometheus_parse::Value::Histogram(buckets) => {
                for bucket in buckets {
                    add(
                        format!("{}_bucket", sample.metric),
                        Some(("le".into(), bucket.less_than.to_string())),
                    );
                }
                add(format!("{}_sum", sample.metric), None);
                add(format!("{}_count", sample.metric), None);
            }
            _ => add(sample.metric.clone(), None),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn alerts_and_dashboard_select_only_labels_and_values_run_exports() {
    let mut exprs: Vec<(String, String)> = alert_rules()
        .into_iter()
        .map(|r| (format!("alert {}", r.alert), r.expr))
        .collect();
    exprs.extend(
        dashboard_queries(&dashboard())
            .into_iter()
            .map(|(title, ref_id, expr)| (format!("panel {title} ({ref_id})"), expr)),
    );

    let (target, replica, base) = start_run("deploy_labels").await;
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .unwrap();
    stop_run(target, replica).await;
    let scraped = scraped_series(&text);

    let mut checked = 0;
    for (what, expr) in &exprs {
        let selection = analyse(expr);
        let mut labels_here: BTreeSet<String> =
            TARGET_LABELS.iter().map(|l| l.to_string()).collect();
        for selector in &selection.selectors {
            if selector.name == "up" {
                continue;
            }
            let series = scraped
                .get(&selector.name)
                .unwrap_or_else(|| panic!("{what}: run does not export {}", selector.name));
            labels_here.extend(series.keys().cloned());
            for (label, op, value) in &selector.matchers {
                if TARGET_LABELS.contains(&label.as_str()) {
                    continue;
                }
                let values = series
                    .get(label)
                    .unwrap_or_else(|| panic!("{what}: {} has no label {label}", selector.name));
                let wanted: Vec<&str> = match op.as_str() {
                    "=" | "!=" => vec![value.as_str()],
                    // A plain alternation names values; other regexes are not checked.
                    "=~" | "!~"
                        if value
                            .chars()
                            .all(|c| c.is_alphanumeric() || c == '_' || c == '|') =>
                    {
                        value.split('|').collect()
                    }
                    _ => vec![],
                };
                for v in wanted {
                    assert!(
                        values.contains(v),
                        "{what}: {label}=\"{v}\" is not a value run exports ({values:?})"
                    );
                }
                checked += 1;
            }
        }
        for label in &selection.grouping {
            assert!(
                labels_here.contains(label),
                "{what}: groups by {label}, which its series do not have"
            );
        }
    }
    assert!(checked > 0, "some label matchers were checked");
}
