//! docker-compose.yml, the real stack for users, cannot be started here (no
//! Docker engine), so its syntax and its consistency with the configuration
//! keys are checked instead: it parses as YAML, has the services the README
//! promises, pins Meilisearch, and sets only variables the service knows.

use yaml_rust2::{Yaml, YamlLoader};

use meili_reconciler::config::{known_keys, ENV_PREFIX, LIBRECHAT_VARS};

fn compose() -> Yaml {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docker-compose.yml");
    let text = std::fs::read_to_string(path).expect("docker-compose.yml");
    let mut docs = YamlLoader::load_from_str(&text).expect("docker-compose.yml is valid YAML");
    assert_eq!(docs.len(), 1);
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

fn services() -> Vec<(String, Yaml)> {
    let compose = merged(&compose());
    compose["services"]
        .as_hash()
        .expect("services")
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_string(), v.clone()))
        .collect()
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
            let key = var
                .strip_prefix(&format!("{ENV_PREFIX}__"))
                .unwrap_or_else(|| panic!("{name}: {var} is neither LibreChat's nor RECONCILER__"))
                .to_lowercase()
                .replacen("__", ".", 1);
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
