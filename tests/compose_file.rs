//! The compose files cannot be started here (no Docker engine), so their
//! syntax and their consistency with the configuration keys are checked
//! instead.
//!
//! - docker-compose.yml, the real stack for users: it parses as YAML, has the
//!   services the README promises, pins Meilisearch, and sets only variables
//!   the service knows.
//! - deploy/librechat/docker-compose.override.yml, the kit for LibreChat's
//!   stock compose (a copy of which is tests/fixtures/librechat-docker-compose.yml):
//!   every service it refers to exists there, our services reach the servers
//!   as LibreChat's `api` does and share its `.env`, every variable it sets
//!   is a known key or LibreChat's, and the README's commands name its services.

use yaml_rust2::{Yaml, YamlLoader};

use meili_reconciler::config::{known_keys, ENV_PREFIX, LIBRECHAT_NO_SYNC, LIBRECHAT_VARS};

const OUR_COMPOSE: &str = "docker-compose.yml";
const LIBRECHAT_OVERRIDE: &str = "deploy/librechat/docker-compose.override.yml";
const LIBRECHAT_STOCK: &str = "tests/fixtures/librechat-docker-compose.yml";

/// A compose file of this repository, parsed.
fn load(path: &str) -> Yaml {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut docs = YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{path} is not valid YAML: {e}"));
    assert_eq!(docs.len(), 1, "{path}: one YAML document");
    docs.remove(0)
}

/// Applies YAML merge keys (`<<: *anchor`), which the parser leaves as keys.
fn merged(node: &Yaml) -> Yaml {
    match node {
        Yaml::Hash(hash) => {
            let mut out = yaml_rust2::yaml::Hash::new();
            if let Some(base) = hash.get(&Yaml::String("<<".into())) {
                if let Yaml::Hash(base) = merged(base) {
                    out.extend(base);
                }
            }
            for (k, v) in hash {
                if k.as_str() != Some("<<") {
                    out.insert(k.clone(), merged(v));
                }
            }
            Yaml::Hash(out)
        }
        Yaml::Array(items) => Yaml::Array(items.iter().map(merged).collect()),
        other => other.clone(),
    }
}

/// The services of a compose file, merge keys applied.
fn services_of(path: &str) -> Vec<(String, Yaml)> {
    let compose = merged(&load(path));
    compose["services"]
        .as_hash()
        .expect("services")
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_string(), v.clone()))
        .collect()
}

fn services() -> Vec<(String, Yaml)> {
    services_of(OUR_COMPOSE)
}

/// A service's `environment`, in either of compose's forms (a map, or a
/// list of `NAME=value`), as (name, value) pairs.
fn environment(service: &Yaml) -> Vec<(String, String)> {
    match &service["environment"] {
        Yaml::Hash(map) => map
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    other => panic!("unexpected environment value {other:?}"),
                };
                (k.as_str().unwrap().to_string(), value)
            })
            .collect(),
        Yaml::Array(items) => items
            .iter()
            .map(|item| {
                let item = item.as_str().expect("NAME=value");
                let (k, v) = item.split_once('=').unwrap_or((item, ""));
                (k.to_string(), v.to_string())
            })
            .collect(),
        Yaml::BadValue => vec![],
        other => panic!("unexpected environment {other:?}"),
    }
}

/// The configuration key a `RECONCILER__SECTION__KEY` variable sets.
fn key_of(var: &str) -> Option<String> {
    var.strip_prefix(&format!("{ENV_PREFIX}__"))
        .map(|rest| rest.to_lowercase().replacen("__", ".", 1))
}

/// Whether `var` is a variable this service reads: LibreChat's name of one
/// of its keys, or the `RECONCILER__` form of a known key.
fn is_our_variable(var: &str) -> bool {
    LIBRECHAT_VARS.iter().any(|(name, _)| *name == var)
        || key_of(var).is_some_and(|key| known_keys().contains(&key))
}

#[test]
fn has_the_promised_services() {
    let names: Vec<String> = services().into_iter().map(|(n, _)| n).collect();
    for expected in [
        "mongo",
        "meilisearch",
        "seed",
        "deploy-sync",
        "replica-1",
        "replica-2",
        "replica-3",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing: {names:?}"
        );
    }
}

#[test]
fn meilisearch_is_pinned_to_a_v1_release_and_keyed_from_the_env_file() {
    let (_, meili) = services()
        .into_iter()
        .find(|(n, _)| n == "meilisearch")
        .unwrap();
    let image = meili["image"].as_str().unwrap();
    let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
    assert!(
        tag.starts_with("v1.") && tag.split('.').count() == 3,
        "Meilisearch must be pinned to an exact v1 tag, got {image}"
    );
    assert_eq!(meili["env_file"].as_str(), Some(".env"));
}

#[test]
fn reconciler_services_set_only_known_settings() {
    let known = known_keys();
    let librechat: Vec<&str> = LIBRECHAT_VARS.iter().map(|(v, _)| *v).collect();
    let mut checked = 0;
    for (name, service) in services() {
        if service["image"].as_str() != Some("meili-reconciler:local") {
            continue;
        }
        let env = service["environment"].as_hash().expect("environment map");
        for (var, _) in env {
            let var = var.as_str().unwrap();
            checked += 1;
            if librechat.contains(&var) {
                continue;
            }
            let key = key_of(var)
                .unwrap_or_else(|| panic!("{name}: {var} is neither LibreChat's nor RECONCILER__"));
            assert!(known.contains(&key), "{name}: {var} sets unknown key {key}");
        }
        assert!(
            env.contains_key(&Yaml::String("MONGO_URI".into()))
                && env.contains_key(&Yaml::String("MEILI_HOST".into())),
            "{name} must name both servers"
        );
    }
    assert!(checked > 0, "no reconciler service found");
}

#[test]
fn env_example_names_the_master_key() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/.env.example");
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.lines().any(|l| l.starts_with("MEILI_MASTER_KEY=")));
}

/// Services of the LibreChat kit that run this service (by their image).
fn our_services(services: &[(String, Yaml)]) -> Vec<(String, Yaml)> {
    let ours: Vec<_> = services
        .iter()
        .filter(|(_, s)| {
            s["image"]
                .as_str()
                .is_some_and(|i| i.contains("meili-reconciler"))
        })
        .cloned()
        .collect();
    assert!(
        !ours.is_empty(),
        "no meili-reconciler service in the override"
    );
    ours
}

/// The services a service names: `depends_on` (list or map), `extends`,
/// `links`, `volumes_from`, `network_mode: service:…`.
fn referenced_services(service: &Yaml) -> Vec<String> {
    let mut names = vec![];
    match &service["depends_on"] {
        Yaml::Array(items) => names.extend(items.iter().map(|i| i.as_str().unwrap().to_string())),
        Yaml::Hash(map) => names.extend(map.keys().map(|k| k.as_str().unwrap().to_string())),
        _ => {}
    }
    if let Some(base) = service["extends"]["service"].as_str() {
        names.push(base.to_string());
    }
    for key in ["links", "volumes_from"] {
        if let Yaml::Array(items) = &service[key] {
            names.extend(
                items
                    .iter()
                    .map(|i| i.as_str().unwrap().split(':').next().unwrap().to_string()),
            );
        }
    }
    if let Some(other) = service["network_mode"]
        .as_str()
        .and_then(|m| m.strip_prefix("service:"))
    {
        names.push(other.to_string());
    }
    names
}

#[test]
fn librechat_override_refers_only_to_services_of_the_stock_compose() {
    let stock: Vec<String> = services_of(LIBRECHAT_STOCK)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for expected in ["api", "mongodb", "meilisearch"] {
        assert!(
            stock.iter().any(|n| n == expected),
            "fixture lacks {expected}"
        );
    }
    let services = services_of(LIBRECHAT_OVERRIDE);
    let ours: Vec<String> = our_services(&services)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for (name, service) in &services {
        if !ours.contains(name) {
            // Anything else the override names only adjusts a stock service.
            assert!(
                stock.contains(name),
                "{name} is neither a stock LibreChat service nor ours"
            );
            assert!(
                service["image"].is_badvalue(),
                "{name}: keep LibreChat's image"
            );
        }
        for other in referenced_services(service) {
            assert!(
                stock.contains(&other) || ours.contains(&other),
                "{name} refers to {other}, which LibreChat's stock compose does not have"
            );
        }
    }
}

#[test]
fn librechat_override_sets_only_known_variables() {
    for (name, service) in services_of(LIBRECHAT_OVERRIDE) {
        let ours = service["image"]
            .as_str()
            .is_some_and(|i| i.contains("meili-reconciler"));
        for (var, _) in environment(&service) {
            if ours {
                assert!(
                    is_our_variable(&var),
                    "{name}: {var} is neither LibreChat's name of a key nor a known RECONCILER__ key"
                );
            } else {
                // On LibreChat's services: a LibreChat variable this service knows.
                assert!(
                    var == LIBRECHAT_NO_SYNC || LIBRECHAT_VARS.iter().any(|(n, _)| *n == var),
                    "{name}: {var} is not a LibreChat variable we know"
                );
            }
        }
    }
}

#[test]
fn librechat_override_reaches_the_servers_as_api_does_and_shares_its_env_file() {
    let stock = services_of(LIBRECHAT_STOCK);
    let api = &stock.iter().find(|(n, _)| n == "api").unwrap().1;
    let api_env = environment(api);
    let api_value = |var: &str| {
        api_env
            .iter()
            .find(|(k, _)| k == var)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("stock api sets no {var}"))
    };
    let services = services_of(LIBRECHAT_OVERRIDE);
    for (name, service) in our_services(&services) {
        let env = environment(&service);
        for var in ["MONGO_URI", "MEILI_HOST"] {
            let ours = env.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone());
            assert_eq!(
                ours,
                Some(api_value(var)),
                "{name}: {var} as LibreChat's api sets it (the .env's value is for outside Docker)"
            );
        }
        let env_file: Vec<&str> = match &service["env_file"] {
            Yaml::String(s) => vec![s.as_str()],
            Yaml::Array(items) => items.iter().filter_map(|i| i.as_str()).collect(),
            _ => vec![],
        };
        assert_eq!(env_file, vec![".env"], "{name}: shares LibreChat's .env");
        for var in env.iter().map(|(k, _)| k) {
            assert_ne!(
                var, "MEILI_MASTER_KEY",
                "{name}: the key comes from .env, not the file"
            );
        }
    }
    // LibreChat's own start-up sync is switched off on its api service.
    let api_override = &services.iter().find(|(n, _)| n == "api").unwrap().1;
    assert!(
        environment(api_override).contains(&(LIBRECHAT_NO_SYNC.to_string(), "true".to_string())),
        "the override sets MEILI_NO_SYNC=true on api"
    );
}

#[test]
fn librechat_override_has_a_run_service_and_a_deploy_time_once_under_a_profile() {
    let services = services_of(LIBRECHAT_OVERRIDE);
    let ours = our_services(&services);
    let command = |s: &Yaml| -> Vec<String> {
        s["command"]
            .as_vec()
            .map(|c| c.iter().map(|a| a.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    let (run_name, run) = ours
        .iter()
        .find(|(_, s)| command(s).first().map(String::as_str) == Some("run"))
        .expect("a `run` service");
    assert!(
        run["profiles"].is_badvalue(),
        "{run_name} starts with `docker compose up`"
    );
    // Its published port reaches the endpoints: it listens on every interface.
    let listen = environment(run)
        .into_iter()
        .find(|(k, _)| k == "RECONCILER__SERVE__LISTEN")
        .map(|(_, v)| v)
        .expect("serve.listen set for the published port");
    let published = run["ports"][0].as_str().expect("a published port");
    let container_port = published.rsplit(':').next().unwrap();
    assert_eq!(listen, format!("0.0.0.0:{container_port}"), "{run_name}");

    let (once_name, once) = ours
        .iter()
        .find(|(_, s)| command(s).first().map(String::as_str) == Some("once"))
        .expect("a `once` service");
    let profiles = once["profiles"].as_vec().expect("`once` under a profile");
    assert!(!profiles.is_empty(), "{once_name}");
    assert_eq!(
        once["restart"].as_str(),
        Some("no"),
        "{once_name} runs once"
    );

    // The README's commands name these services.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for command in [
        format!("docker compose run --rm {once_name}"),
        format!("docker compose run --rm {run_name} reindex"),
        format!("docker compose exec {run_name} meili-reconciler status"),
    ] {
        assert!(readme.contains(&command), "README lacks `{command}`");
    }
    assert!(
        readme.contains(LIBRECHAT_OVERRIDE),
        "README names the override"
    );
}
