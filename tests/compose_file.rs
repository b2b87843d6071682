//! The compose files cannot be started here (no Docker engine), so their
//! syntax and their consistency with the configuration keys are checked
//! instead.
//!
//! - docker-compose.yml, the real stack for users: it parses as YAML, has the
//!   services the README promises, pins Meilisearch, and sets only variables
//!   the service knows.
//! - deploy/librechat/, the overrides for LibreChat's own compose files (copies
//!   of which are tests/fixtures/librechat-docker-compose.yml and
//!   tests/fixtures/librechat-deploy-compose.yml): every service an override
//!   refers to exists there, our services reach the servers as LibreChat's
//!   `api` does and share its `.env`, every variable set is a known key or
//!   LibreChat's, the variants differ from the plain override only where they
//!   say, the replica-set variant names one set everywhere, and
//!   docs/install.md gives the commands that fit them.

use yaml_rust2::{Yaml, YamlLoader};

use meili_reconciler::config::{known_keys, ENV_PREFIX, LIBRECHAT_NO_SYNC, LIBRECHAT_VARS};

const OUR_COMPOSE: &str = "docker-compose.yml";
const LIBRECHAT_OVERRIDE: &str = "deploy/librechat/docker-compose.override.yml";
/// The override merged with what LibreChat's docs tell users to put in theirs.
const LIBRECHAT_OVERRIDE_MERGED: &str = "deploy/librechat/docker-compose.override.merged.yml";
/// The override with LibreChat's `mongodb` as a one-member replica set.
const LIBRECHAT_OVERRIDE_REPLICA_SET: &str =
    "deploy/librechat/docker-compose.override.replica-set.yml";
/// LibreChat's docker-compose.yml.
const LIBRECHAT_STOCK: &str = "tests/fixtures/librechat-docker-compose.yml";
/// LibreChat's deploy-compose.yml (production: nginx `client` in front of `api`).
const LIBRECHAT_DEPLOY: &str = "tests/fixtures/librechat-deploy-compose.yml";
const INSTALL_GUIDE: &str = "docs/install.md";

/// Every override we ship, with the LibreChat compose files it goes beside.
const KITS: &[(&str, &[&str])] = &[
    (LIBRECHAT_OVERRIDE, &[LIBRECHAT_STOCK, LIBRECHAT_DEPLOY]),
    (LIBRECHAT_OVERRIDE_MERGED, &[LIBRECHAT_STOCK]),
    (
        LIBRECHAT_OVERRIDE_REPLICA_SET,
        &[LIBRECHAT_STOCK, LIBRECHAT_DEPLOY],
    ),
];

/// Variables our services may set that are no settings of ours: read by the
/// HTTP client (an `HTTP_PROXY` in the shared `.env` must not carry requests
/// to Meilisearch).
const PROCESS_VARS: &[&str] = &["NO_PROXY"];

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

/// Services of a LibreChat override that run this service (by their image).
fn our_services(services: &[(String, Yaml)]) -> Vec<(String, Yaml)> {
    let mut ours: Vec<_> = services
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
    ours.sort_by(|a, b| a.0.cmp(&b.0));
    ours
}

fn service<'a>(services: &'a [(String, Yaml)], name: &str) -> Option<&'a Yaml> {
    services.iter().find(|(n, _)| n == name).map(|(_, s)| s)
}

fn env_value(env: &[(String, String)], var: &str) -> Option<String> {
    env.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone())
}

/// A service's command as words (compose takes a list or a string).
fn command(service: &Yaml) -> Vec<String> {
    match &service["command"] {
        Yaml::Array(items) => items
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect(),
        Yaml::String(s) => s.split_whitespace().map(str::to_string).collect(),
        _ => vec![],
    }
}

/// `api`'s environment once `overrides` is merged over `stock`: compose
/// merges `environment` by variable name, the later file winning.
fn effective_api_env(
    stock: &[(String, Yaml)],
    overrides: &[(String, Yaml)],
) -> Vec<(String, String)> {
    let mut env = environment(service(stock, "api").expect("stock api"));
    if let Some(api) = service(overrides, "api") {
        for (var, value) in environment(api) {
            env.retain(|(k, _)| *k != var);
            env.push((var, value));
        }
    }
    env
}

/// The service without one variable of its (merged, map-form) environment.
fn without_var(service: &Yaml, var: &str) -> Yaml {
    let mut service = service.clone();
    if let Yaml::Hash(map) = &mut service {
        let key = Yaml::String("environment".into());
        if let Some(Yaml::Hash(env)) = map.get_mut(&key) {
            env.remove(&Yaml::String(var.into()));
        }
    }
    service
}

/// A text file of this repository.
fn read_text(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}"))
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
fn librechat_overrides_refer_only_to_services_of_the_composes_they_go_beside() {
    for (kit, stocks) in KITS {
        let services = services_of(kit);
        let ours: Vec<String> = our_services(&services)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        for stock_path in *stocks {
            let stock: Vec<String> = services_of(stock_path)
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            for expected in ["api", "mongodb", "meilisearch"] {
                assert!(
                    stock.iter().any(|n| n == expected),
                    "{stock_path} lacks {expected}"
                );
            }
            for (name, service) in &services {
                if !ours.contains(name) {
                    // Anything else the override names only adjusts a stock service.
                    assert!(
                        stock.contains(name),
                        "{kit}: {name} is neither a service of {stock_path} nor ours"
                    );
                    assert!(
                        service["image"].is_badvalue(),
                        "{kit}: {name}: keep LibreChat's image"
                    );
                }
                for other in referenced_services(service) {
                    assert!(
                        stock.contains(&other) || ours.contains(&other),
                        "{kit}: {name} refers to {other}, which {stock_path} does not have"
                    );
                }
            }
        }
    }
}

#[test]
fn librechat_overrides_set_only_known_variables() {
    for (kit, _) in KITS {
        for (name, service) in services_of(kit) {
            let ours = service["image"]
                .as_str()
                .is_some_and(|i| i.contains("meili-reconciler"));
            for (var, _) in environment(&service) {
                if ours {
                    assert!(
                        is_our_variable(&var) || PROCESS_VARS.contains(&var.as_str()),
                        "{kit}: {name}: {var} is neither LibreChat's name of a key nor a known RECONCILER__ key"
                    );
                } else {
                    // On LibreChat's services: a LibreChat variable this service knows.
                    assert!(
                        var == LIBRECHAT_NO_SYNC || LIBRECHAT_VARS.iter().any(|(n, _)| *n == var),
                        "{kit}: {name}: {var} is not a LibreChat variable we know"
                    );
                }
            }
        }
    }
}

#[test]
fn librechat_overrides_reach_the_servers_as_api_does_and_share_its_env_file() {
    for (kit, stocks) in KITS {
        let services = services_of(kit);
        // LibreChat's own start-up sync is switched off on its api service.
        let api_override = service(&services, "api").expect("the override adjusts api");
        assert_eq!(
            env_value(&environment(api_override), LIBRECHAT_NO_SYNC).as_deref(),
            Some("true"),
            "{kit}: MEILI_NO_SYNC=true on api"
        );
        for stock_path in *stocks {
            let api_env = effective_api_env(&services_of(stock_path), &services);
            for (name, ours) in our_services(&services) {
                let env = environment(&ours);
                for var in ["MONGO_URI", "MEILI_HOST"] {
                    let api_value = env_value(&api_env, var)
                        .unwrap_or_else(|| panic!("api sets no {var} in {stock_path} + {kit}"));
                    assert_eq!(
                        env_value(&env, var),
                        Some(api_value),
                        "{kit}: {name}: {var} as LibreChat's api has it beside {stock_path} \
                         (the .env's value is for outside Docker)"
                    );
                }
                let env_file: Vec<&str> = match &ours["env_file"] {
                    Yaml::String(s) => vec![s.as_str()],
                    Yaml::Array(items) => items.iter().filter_map(|i| i.as_str()).collect(),
                    _ => vec![],
                };
                assert_eq!(
                    env_file,
                    vec![".env"],
                    "{kit}: {name}: shares LibreChat's .env"
                );
                assert!(
                    env_value(&env, "MEILI_MASTER_KEY").is_none(),
                    "{kit}: {name}: the key comes from .env, not the file"
                );
            }
        }
    }
}

#[test]
fn the_librechat_composes_hand_api_the_env_file_as_the_guide_says() {
    // docker-compose.yml: bind-mounted, read by LibreChat itself (its values
    // never beat the container's environment); deploy-compose.yml: `env_file`,
    // under the service's `environment`.
    let stock = services_of(LIBRECHAT_STOCK);
    let api = service(&stock, "api").unwrap();
    let mounts_env = api["volumes"].as_vec().unwrap().iter().any(|v| {
        v["source"].as_str() == Some("./.env") && v["target"].as_str() == Some("/app/.env")
    });
    assert!(
        mounts_env,
        "{LIBRECHAT_STOCK}: api mounts ./.env at /app/.env"
    );
    assert!(
        api["env_file"].is_badvalue(),
        "{LIBRECHAT_STOCK}: no env_file on api"
    );

    let deploy = services_of(LIBRECHAT_DEPLOY);
    let api = service(&deploy, "api").unwrap();
    assert_eq!(
        api["env_file"][0].as_str(),
        Some(".env"),
        "{LIBRECHAT_DEPLOY}"
    );
    let client = service(&deploy, "client").expect("deploy-compose.yml has nginx as `client`");
    assert!(client["image"].as_str().unwrap().starts_with("nginx:"));
}

#[test]
fn librechat_overrides_have_a_run_service_and_a_deploy_time_once_under_a_profile() {
    for (kit, _) in KITS {
        let services = services_of(kit);
        let ours = our_services(&services);
        let (run_name, run) = ours
            .iter()
            .find(|(_, s)| command(s).first().map(String::as_str) == Some("run"))
            .unwrap_or_else(|| panic!("{kit}: a `run` service"));
        assert!(
            run["profiles"].is_badvalue(),
            "{kit}: {run_name} starts with `docker compose up`"
        );
        // Its published port reaches the endpoints: it listens on every interface.
        let listen = env_value(&environment(run), "RECONCILER__SERVE__LISTEN")
            .unwrap_or_else(|| panic!("{kit}: serve.listen set for the published port"));
        let published = run["ports"][0].as_str().expect("a published port");
        let container_port = published.rsplit(':').next().unwrap();
        assert_eq!(
            listen,
            format!("0.0.0.0:{container_port}"),
            "{kit}: {run_name}"
        );
        // Docker waits long enough after SIGTERM for `run` to stop at a safe
        // point and release its lease (serve.grace, as the service loads it).
        let settings = meili_reconciler::config::load(&meili_reconciler::config::Sources {
            base_dir: None,
            config_file: None,
            env: environment(run).into_iter().collect(),
        })
        .unwrap_or_else(|e| panic!("{kit}: {run_name}'s environment: {e}"));
        let stop_grace = run["stop_grace_period"]
            .as_str()
            .map(|d| humantime::parse_duration(d).expect("a duration"))
            .unwrap_or(std::time::Duration::from_secs(10));
        assert!(
            stop_grace > settings.serve.grace,
            "{kit}: {run_name}: stop_grace_period {stop_grace:?} must exceed serve.grace {:?}",
            settings.serve.grace
        );

        let (once_name, once) = ours
            .iter()
            .find(|(_, s)| command(s).first().map(String::as_str) == Some("once"))
            .unwrap_or_else(|| panic!("{kit}: a `once` service"));
        let profiles = once["profiles"].as_vec().expect("`once` under a profile");
        assert!(!profiles.is_empty(), "{kit}: {once_name}");
        assert_eq!(
            once["restart"].as_str(),
            Some("no"),
            "{kit}: {once_name} runs once"
        );
    }
}

#[test]
fn librechat_override_variants_differ_from_the_plain_one_only_where_they_say() {
    let plain = services_of(LIBRECHAT_OVERRIDE);
    let plain_ours = our_services(&plain);
    let plain_api_env = environment(service(&plain, "api").unwrap());
    let names = |services: &[(String, Yaml)]| -> Vec<String> {
        let mut names: Vec<String> = services.iter().map(|(n, _)| n.clone()).collect();
        names.sort();
        names
    };
    let with = |extra: &[&str]| -> Vec<String> {
        let mut names = names(&plain);
        names.extend(extra.iter().map(|s| s.to_string()));
        names.sort();
        names
    };

    // Merged with LibreChat's documented override: ours and api's environment
    // as in the plain one, plus librechat.yaml on api and the master key on
    // meilisearch.
    let merged = services_of(LIBRECHAT_OVERRIDE_MERGED);
    assert_eq!(
        names(&merged),
        with(&["meilisearch"]),
        "{LIBRECHAT_OVERRIDE_MERGED}"
    );
    assert_eq!(
        our_services(&merged),
        plain_ours,
        "{LIBRECHAT_OVERRIDE_MERGED}: our services"
    );
    let api = service(&merged, "api").unwrap();
    assert_eq!(
        environment(api),
        plain_api_env,
        "{LIBRECHAT_OVERRIDE_MERGED}: api"
    );
    let mounts_config = api["volumes"]
        .as_vec()
        .expect("api volumes")
        .iter()
        .any(|v| {
            let (source, target) = match v {
                Yaml::String(s) => {
                    let mut parts = s.split(':');
                    (parts.next(), parts.next())
                }
                v => (v["source"].as_str(), v["target"].as_str()),
            };
            source == Some("./librechat.yaml") && target == Some("/app/librechat.yaml")
        });
    assert!(
        mounts_config,
        "{LIBRECHAT_OVERRIDE_MERGED}: librechat.yaml on api, as LibreChat's docs have it"
    );
    assert_eq!(
        env_value(
            &environment(service(&merged, "meilisearch").unwrap()),
            "MEILI_MASTER_KEY"
        )
        .as_deref(),
        Some("${MEILI_MASTER_KEY}"),
        "{LIBRECHAT_OVERRIDE_MERGED}: meilisearch keyed from .env, as LibreChat's docs have it"
    );

    // Replica set: only mongodb's command and both sides' MONGO_URI change.
    let replica = services_of(LIBRECHAT_OVERRIDE_REPLICA_SET);
    assert_eq!(
        names(&replica),
        with(&["mongodb"]),
        "{LIBRECHAT_OVERRIDE_REPLICA_SET}"
    );
    let strip = |services: Vec<(String, Yaml)>| -> Vec<(String, Yaml)> {
        services
            .into_iter()
            .map(|(n, s)| (n, without_var(&s, "MONGO_URI")))
            .collect()
    };
    assert_eq!(
        strip(our_services(&replica)),
        strip(plain_ours),
        "{LIBRECHAT_OVERRIDE_REPLICA_SET}: our services, but for MONGO_URI"
    );
    let mut api_env = environment(service(&replica, "api").unwrap());
    api_env.retain(|(k, _)| k != "MONGO_URI");
    assert_eq!(
        api_env, plain_api_env,
        "{LIBRECHAT_OVERRIDE_REPLICA_SET}: api, but for MONGO_URI"
    );
}

#[test]
fn replica_set_override_names_one_set_everywhere() {
    let services = services_of(LIBRECHAT_OVERRIDE_REPLICA_SET);
    let words = command(service(&services, "mongodb").expect("mongodb's command"));
    assert_eq!(words.first().map(String::as_str), Some("mongod"));
    for kept in ["--noauth", "--bind_ip_all"] {
        assert!(
            words.iter().any(|w| w == kept),
            "mongod keeps {kept}: {words:?}"
        );
    }
    let set = words
        .iter()
        .position(|w| w == "--replSet")
        .and_then(|i| words.get(i + 1))
        .expect("--replSet NAME")
        .clone();

    // LibreChat and our services connect to that set, through the host its
    // configuration names.
    let mut uris = vec![(
        "api".to_string(),
        env_value(
            &environment(service(&services, "api").unwrap()),
            "MONGO_URI",
        )
        .expect("api's MONGO_URI"),
    )];
    for (name, ours) in our_services(&services) {
        uris.push((name, env_value(&environment(&ours), "MONGO_URI").unwrap()));
    }
    for (name, uri) in uris {
        let parsed = mongodb::options::ConnectionString::parse(&uri)
            .unwrap_or_else(|e| panic!("{name}: {uri}: {e}"));
        assert_eq!(
            parsed.replica_set.as_deref(),
            Some(set.as_str()),
            "{name}: {uri}"
        );
        assert_ne!(parsed.direct_connection, Some(true), "{name}: {uri}");
        let hosts: Vec<String> = match &parsed.host_info {
            mongodb::options::HostInfo::HostIdentifiers(hosts) => {
                hosts.iter().map(|h| h.to_string()).collect()
            }
            other => panic!("{name}: {uri}: {other:?}"),
        };
        assert_eq!(hosts, vec!["mongodb:27017"], "{name}: {uri}");
    }

    // The one-time initiation, in the guide and in the file's own comments,
    // names the same set and the member as the compose network knows it.
    let initiate =
        format!("rs.initiate({{_id: \"{set}\", members: [{{_id: 0, host: \"mongodb:27017\"}}]}})");
    let command = format!("docker compose exec mongodb mongosh --quiet --eval '{initiate}'");
    for doc in [INSTALL_GUIDE, LIBRECHAT_OVERRIDE_REPLICA_SET] {
        assert!(read_text(doc).contains(&command), "{doc} lacks `{command}`");
    }
}

#[test]
fn install_guide_names_every_override_and_the_commands_that_fit_them() {
    let guide = read_text(INSTALL_GUIDE);
    for (kit, _) in KITS {
        assert!(guide.contains(kit), "{INSTALL_GUIDE} does not name {kit}");
        let ours = our_services(&services_of(kit));
        let name_of = |verb: &str| {
            ours.iter()
                .find(|(_, s)| command(s).first().map(String::as_str) == Some(verb))
                .map(|(n, _)| n.clone())
                .unwrap()
        };
        let (run, once) = (name_of("run"), name_of("once"));
        for command in [
            format!("docker compose run --rm {once}"),
            format!("docker compose run --rm {run} reindex"),
            format!("docker compose exec {run} meili-reconciler status"),
        ] {
            assert!(
                guide.contains(&command),
                "{INSTALL_GUIDE} lacks `{command}`"
            );
        }
    }
    // deploy-compose.yml is not a default name: compose reads no override
    // beside it unless both files are named.
    let with_deploy = "docker compose -f deploy-compose.yml -f docker-compose.override.yml";
    assert!(
        guide.contains(with_deploy),
        "{INSTALL_GUIDE} lacks `{with_deploy}`"
    );
    // The README points operators at the plain override.
    assert!(
        read_text("README.md").contains(LIBRECHAT_OVERRIDE),
        "README names {LIBRECHAT_OVERRIDE}"
    );
}
