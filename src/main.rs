//! The `switchyard` binary: a thin CLI over the library.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use switchyard::provider::mock::{MockServer, MockSpec};
use switchyard::provider::{HttpClients, install_crypto_provider};
use tracing_subscriber::filter::LevelFilter;

// The request path allocates many small, short-lived objects (JSON trees, headers); mimalloc
// serves them with less CPU than glibc malloc on the gateway's hot path.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "switchyard", version, about = "An AI routing gateway")]
struct Cli {
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, global = true, default_value = "info", env = "SWITCHYARD_LOG")]
    log_level: LevelFilter,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum MigrateAction {
    /// Print every migration, applied or not, without changing anything.
    Status {
        #[arg(long, short)]
        config: PathBuf,
    },
}

#[derive(Subcommand)]
enum AuditAction {
    /// Check the audit's hash chain, oldest row first: each row carries the hash of the one
    /// before, and each hash is what its row hashes to.
    Verify {
        #[arg(long, short)]
        config: PathBuf,
    },
}

#[derive(Subcommand)]
enum SemanticAction {
    /// Route every prompt of a labelled set as a request would be routed, and report accuracy,
    /// precision and recall per instance, the confusion table, the scores' spread and the
    /// thresholds that would maximise accuracy on the set (printed, never applied).
    Eval {
        #[arg(long, short)]
        config: PathBuf,
        /// The router's virtual model (`auto`).
        #[arg(long)]
        router: String,
        /// JSON lines of `{"text": ..., "instance": ...}` (the catchall's name is a label too).
        #[arg(long)]
        labelled: PathBuf,
        /// The report as JSON (`accuracy` between 0 and 1 at the top).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum CacheAction {
    /// Decide labelled pairs of questions as a semantic lookup would (cosine ≥ [cache]
    /// similarity, then the guards), and report precision, hit rate, what the cosine alone
    /// would do and a sweep of thresholds.
    Eval {
        #[arg(long, short)]
        config: PathBuf,
        /// JSON lines of `{"a": ..., "b": ..., "same": true|false}` (optionally `"kind"`).
        #[arg(long)]
        labelled: PathBuf,
        /// The report as JSON (`precision` and `hit_rate` between 0 and 1 at the top).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway. Without --config: the embedded demo (mock channels, demo key, loopback).
    Serve {
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Override the config's listen address (e.g. 127.0.0.1:0 for any free port).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Demo mode: send no demo traffic on start.
        #[arg(long)]
        no_demo_traffic: bool,
    },
    /// Write a commented config for the providers named (asked for on a terminal), reading
    /// every secret from the environment, and print a new gateway key once. Never overwrites.
    Init {
        /// Comma-separated: openai, anthropic, gemini, azure, bedrock, vertex, groq, together,
        /// fireworks, deepseek, mistral, xai, openrouter, cerebras, perplexity, ollama, vllm,
        /// lmstudio, mock.
        #[arg(long, short)]
        provider: Option<String>,
        /// Where to write it.
        #[arg(long, short, default_value = "switchyard.toml")]
        output: PathBuf,
    },
    /// Validate a config and print what would be served, without starting.
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Show the plan a request would follow (redirects, chain, candidate channels by tier and
    /// weight), as `POST /v1/route/explain` does, without calling any upstream. Health is
    /// this process's own (fresh): ask a running gateway's endpoint for its live health.
    Explain {
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// The gateway key, by its name in the config (or the key itself).
        #[arg(long)]
        key: String,
        /// The model; repeat for a chain (`--model a --model b` = `models: ["a", "b"]`).
        #[arg(long, required = true)]
        model: Vec<String>,
        /// The user's prompt, for a semantic router (`auto`) to decide by.
        #[arg(long)]
        prompt: Option<String>,
    },
    /// The store's migrations: `status` says which this binary knows and the store has applied
    /// (the gateway applies them itself at start-up).
    Migrate {
        #[command(subcommand)]
        action: MigrateAction,
    },
    /// Re-seal every secret in the store under SWITCHYARD_NEW_MASTER_KEY, online: replicas
    /// keep serving; run them with both keys set until this finishes (docs/upgrading.md).
    RotateMasterKey {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Semantic routers: `eval` measures one against a labelled set of prompts.
    Semantic {
        #[command(subcommand)]
        action: SemanticAction,
    },
    /// The response cache: `eval` measures semantic mode against labelled pairs of questions.
    Cache {
        #[command(subcommand)]
        action: CacheAction,
    },
    /// The admin audit: `verify` checks its tamper-evident chain.
    Audit {
        #[command(subcommand)]
        action: AuditAction,
    },
    /// Print the config file's JSON Schema (draft 7) for editors: each field's doc line,
    /// default and allowed values. `init` writes it beside the config.
    Schema,
    /// Exit 0 when `url` answers 2xx within 3 s, else 1 saying why: a container's health check
    /// where the image has no curl (deploy/Dockerfile).
    Probe {
        #[arg(default_value = "http://127.0.0.1:8080/healthz")]
        url: String,
    },
    /// Run the mock provider as a standalone OpenAI-compatible server.
    Mock {
        #[arg(long, default_value_t = 0)]
        port: u16,
        #[arg(long, default_value = "127.0.0.1")]
        host: std::net::IpAddr,
        #[arg(long, default_value = "Hello from the mock.")]
        text: String,
        #[arg(long, default_value_t = 0)]
        ttft_ms: u64,
        #[arg(long, default_value_t = 0)]
        chunk_ms: u64,
        #[arg(long, default_value_t = 4)]
        chunks: u32,
        /// A TOML file with a full mock spec (text, timings, `fault`, `script`); overrides the
        /// flags above.
        #[arg(long)]
        spec: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_max_level(cli.log_level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    install_crypto_provider();
    raise_open_file_limit();
    // On one core (a pinned process, a one-CPU container) the work-stealing scheduler only adds
    // cross-thread wake-ups: its one worker is not the thread that runs `block_on`. There, one
    // current-thread runtime runs everything (the tests run the gateway that way too).
    let one_core = std::thread::available_parallelism().is_ok_and(|n| n.get() == 1);
    let mut builder = if one_core {
        // Its other threads are all the blocking pool's (SQLite, files): named for what they are.
        let mut b = tokio::runtime::Builder::new_current_thread();
        b.thread_name("sy-blocking");
        b
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Every client stream holds two sockets (the client's and the upstream's): the soft limit on
/// open files (often 1024) is raised to the hard limit, so `[server] max_connections` binds
/// first.
fn raise_open_file_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!(open_files = n, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
}

async fn run(cmd: Command) -> Result<(), Box<dyn std::error::Error>> {
    match cmd {
        Command::Check { config } => check(&config),
        Command::Init { provider, output } => init(provider, &output),
        Command::Migrate {
            action: MigrateAction::Status { config },
        } => migrate_status(&config).await,
        Command::RotateMasterKey { config } => rotate(&config).await,
        Command::Audit {
            action: AuditAction::Verify { config },
        } => audit_verify(&config).await,
        Command::Explain {
            config,
            key,
            model,
            prompt,
        } => explain(config.as_deref(), &key, &model, prompt).await,
        Command::Serve {
            config,
            listen,
            no_demo_traffic,
        } => serve(config.as_deref(), listen, !no_demo_traffic).await,
        Command::Probe { url } => probe(&url).await,
        Command::Schema => {
            let schema = switchyard::config::schema::schema();
            println!("{}", serde_json::to_string_pretty(&schema)?);
            Ok(())
        }
        Command::Semantic {
            action:
                SemanticAction::Eval {
                    config,
                    router,
                    labelled,
                    json,
                },
        } => semantic_eval(&config, &router, &labelled, json).await,
        Command::Cache {
            action:
                CacheAction::Eval {
                    config,
                    labelled,
                    json,
                },
        } => cache_eval(&config, &labelled, json).await,
        Command::Mock {
            port,
            host,
            text,
            ttft_ms,
            chunk_ms,
            chunks,
            spec,
        } => {
            let flags = MockSpec {
                text,
                ttft_ms,
                chunk_ms,
                chunks,
                ..MockSpec::default()
            };
            mock(host, port, spec.as_deref(), flags).await
        }
    }
}

/// `switchyard probe`: whether `url` answers 2xx.
async fn probe(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(3))
        .no_proxy()
        .build()?;
    let status = client.get(url).send().await?.status();
    if !status.is_success() {
        return Err(format!("{url} answered {status}").into());
    }
    println!("{url}: {status}");
    Ok(())
}

/// `switchyard init`: the config written, the key shown once, what to set next.
fn init(provider: Option<String>, output: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use std::io::{IsTerminal, Write};
    let list = match provider {
        Some(list) => list,
        None if std::io::stdin().is_terminal() => {
            eprint!(
                "Providers ({}), comma-separated: ",
                switchyard::init::names()
            );
            std::io::stderr().flush()?;
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            line
        }
        None => return Err(switchyard::init::InitError::NoProvider.into()),
    };
    let providers = switchyard::init::parse_providers(&list)?;
    let key = switchyard::store::seal::generate_key()?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(output)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                format!("{} exists: init never overwrites a file", output.display())
            }
            _ => format!("{}: {e}", output.display()),
        })?;
    file.write_all(switchyard::init::render(&providers).as_bytes())?;
    let path = output.display();
    println!("wrote {path}");
    let schema = output.with_file_name(switchyard::config::schema::FILE_NAME);
    match switchyard::init::write_schema(&schema)? {
        true => println!("wrote {} (completion in editors)", schema.display()),
        false => eprintln!(
            "{} is not a Switchyard schema: left as it is",
            schema.display()
        ),
    }
    println!(
        "the gateway key (shown once; the config reads it from ${}):",
        switchyard::init::KEY_VAR
    );
    println!("  export {}={key}", switchyard::init::KEY_VAR);
    let vars = switchyard::init::variables(&providers);
    println!("set {}, then:", vars.join(", "));
    println!("  switchyard check --config {path}");
    println!("  switchyard serve --config {path}");
    Ok(())
}

/// `switchyard check`: the config's summary, or why it does not load.
fn check(config: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let snap = switchyard::app::load(Some(config), &HttpClients::default())?;
    print!("{}", snap.describe());
    println!("config OK");
    Ok(())
}

/// `switchyard migrate status`: where the config's store is, migration by migration.
async fn migrate_status(config: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let snap = switchyard::app::load(Some(config), &HttpClients::default())?;
    let store = snap
        .store
        .as_ref()
        .ok_or("the config has no [store]: there is nothing to migrate")?;
    let db = switchyard::store::Db::connect(store.url.expose()).await?;
    let migrations = db.migrations().await?;
    println!("store: {}", db.backend());
    for m in &migrations {
        let state = if m.applied { "applied" } else { "pending" };
        println!("{:>14}  {state:<8} {}", m.version, m.description);
    }
    let pending = migrations.iter().filter(|m| !m.applied).count();
    println!("{pending} pending");
    Ok(())
}

/// The config's store settings, or why there are none.
fn store_settings(
    config: &Path,
) -> Result<switchyard::config::StoreSettings, Box<dyn std::error::Error>> {
    let snap = switchyard::app::load(Some(config), &HttpClients::default())?;
    Ok(snap
        .store
        .clone()
        .ok_or("the config has no [store]: there is no store to work on")?)
}

/// `switchyard rotate-master-key`: every sealed value under the new key.
async fn rotate(config: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let settings = store_settings(config)?;
    let env = switchyard::store::MasterEnv::from_env();
    if env.next.as_deref().is_none_or(|k| k.trim().is_empty()) {
        return Err(
            "set SWITCHYARD_NEW_MASTER_KEY to the new master key (32 bytes, base64)".into(),
        );
    }
    let store = switchyard::store::Store::open(&settings, env).await?;
    let done = store
        .rotate("rotate-master-key", switchyard::clock::unix_ms())
        .await?;
    println!(
        "re-sealed {} objects{}; every secret is now under master key {}",
        done.objects,
        if done.pepper { " and the pepper" } else { "" },
        store.describe()["master_key"].as_str().unwrap_or("?"),
    );
    println!(
        "now set SWITCHYARD_MASTER_KEY to the new key (and unset SWITCHYARD_NEW_MASTER_KEY) on every replica"
    );
    Ok(())
}

/// `switchyard audit verify`: the chain checked, or the first row that breaks it.
async fn audit_verify(config: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let settings = store_settings(config)?;
    // Read as it is: verifying never migrates.
    let db = switchyard::store::Db::connect(settings.url.expose()).await?;
    let mut rows = db.audit(i64::MAX, None).await?;
    rows.reverse();
    match switchyard::store::objects::verify(&rows) {
        Ok(()) => {
            println!("audit chain OK: {} rows", rows.len());
            Ok(())
        }
        Err(id) => {
            Err(format!("the audit chain breaks at row {id}: it was changed or removed").into())
        }
    }
}

/// The config and the labelled set an evaluation reads.
fn eval_inputs(
    config: &Path,
    labelled: &Path,
) -> Result<(switchyard::config::Snapshot, String), Box<dyn std::error::Error>> {
    let snap = switchyard::app::load(Some(config), &HttpClients::default())?;
    let lines =
        std::fs::read_to_string(labelled).map_err(|e| format!("{}: {e}", labelled.display()))?;
    Ok((snap, lines))
}

/// An evaluation's report, as JSON or as `text` writes it for a terminal.
fn print_report(
    report: &serde_json::Value,
    json: bool,
    text: fn(&serde_json::Value) -> String,
) -> Result<(), Box<dyn std::error::Error>> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", text(report));
    }
    Ok(())
}

/// `switchyard semantic eval`: a router's decisions on labelled prompts.
async fn semantic_eval(
    config: &Path,
    router: &str,
    labelled: &Path,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let (snap, lines) = eval_inputs(config, labelled)?;
    let report = switchyard::semantic::eval::run(&snap, router, &lines).await?;
    print_report(&report, json, switchyard::semantic::eval::text)
}

/// `switchyard cache eval`: the semantic cache's decisions on labelled pairs.
async fn cache_eval(
    config: &Path,
    labelled: &Path,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let (snap, lines) = eval_inputs(config, labelled)?;
    let report = switchyard::cache::eval::run(&snap, &lines).await?;
    print_report(&report, json, switchyard::cache::eval::text)
}

/// `switchyard explain`: the plan for one key and model (or chain), printed as JSON.
async fn explain(
    config: Option<&Path>,
    key: &str,
    model: &[String],
    prompt: Option<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let snap = switchyard::app::load(config, &HttpClients::default())?;
    let gkey = snap
        .key_named(key)
        .or_else(|| snap.authenticate(key))
        .ok_or("no key of that name (or value) in the config")?;
    let mut spec = switchyard::protocol::chain::ChainSpec::default();
    if model.len() > 1 {
        let entries = model
            .iter()
            .map(|m| switchyard::protocol::chain::ChainEntry {
                model: m.clone(),
                ..Default::default()
            })
            .collect();
        spec.entries = switchyard::protocol::chain::dedupe(entries).map_err(|e| e.message)?;
    }
    let health =
        switchyard::health::Health::new(std::sync::Arc::new(switchyard::clock::SystemClock));
    // Semantic routers named in the chain decide by the prompt, as the endpoint does.
    let mut decisions = Vec::new();
    let mut request = None;
    if let Some(p) = prompt {
        let req = switchyard::protocol::openai::request_from_value(serde_json::json!({
            "model": model[0], "messages": [{"role": "user", "content": p}]
        }))
        .map_err(|e| e.message)?;
        let semantic = switchyard::semantic::Semantic::default();
        for name in model {
            let routed = snap
                .redirect(gkey, name)
                .map_or_else(|| name.clone(), |(to, _)| to);
            if let Some((i, _)) = snap.router(&routed) {
                decisions.push(semantic.decide(&snap, &health, i, &req).await);
            }
        }
        request = Some(req);
    } else if let Some(name) = model.iter().find(|m| snap.router(m).is_some()) {
        return Err(format!("{name} is a semantic router: give --prompt to decide by").into());
    }
    let chain = switchyard::router::chain(&snap, gkey, &spec, &model[0], true, &decisions)?;
    let ask = request.as_ref().map_or_else(Default::default, |r| {
        switchyard::server::explain::Ask::of(&snap, r)
    });
    let mut plan =
        switchyard::server::explain::explain(&snap, &health, gkey, &chain, &decisions, ask);
    if let Some(req) = &request {
        switchyard::server::explain::explain_context_into(
            &mut plan, &snap, gkey, &chain, req, None,
        );
        // Offline: the costs are the request's, the budgets as a fresh process sees them.
        let meter =
            switchyard::spend::Meter::new(switchyard::spend::Backend::Memory(Default::default()));
        switchyard::server::explain::explain_spend_into(
            &mut plan, &snap, &meter, gkey, &chain, req,
        )
        .await;
    }
    println!("{}", serde_json::to_string_pretty(&plan)?);
    Ok(())
}

/// `switchyard serve`: the gateway until SIGINT/SIGTERM, then a graceful shutdown.
async fn serve(
    config: Option<&Path>,
    listen: Option<SocketAddr>,
    demo_traffic: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    use switchyard::app::demo::Demo;
    let clients = HttpClients::default();
    // Held to the end: the demo's store lives in its temporary directory.
    let (snap, demo) = match config {
        Some(_) => (switchyard::app::load(config, &clients)?, None),
        None => {
            let (demo, snap) = Demo::load(&clients)?;
            (snap, Some(demo))
        }
    };
    let running = switchyard::app::start(snap, clients, listen).await?;
    if demo.is_some() {
        tracing::warn!(
            "DEMO MODE: no --config given. Serving model `demo` from two mock channels; \
             the public demo key `{}` is accepted, on loopback only.",
            switchyard::config::DEMO_KEY
        );
    }
    #[cfg(unix)]
    switchyard::app::reload_on_sighup(running.state.clone())?;
    print!("{}", running.state.live.load().describe());
    if let Some(demo) = &demo {
        println!("{}", demo.banner(running.addr));
    }
    println!("switchyard listening on http://{}", running.addr);
    if let Some(a) = running.admin_addr {
        println!("switchyard admin API listening on http://{a}");
    }
    if demo.is_some() && demo_traffic {
        Demo::traffic(running.addr);
    }
    stop_signal().await?;
    // Read now: a reload may have changed it since the start.
    let grace = running.state.live.load().server.drain_timeout;
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        "shutting down: no new connections; finishing requests in flight"
    );
    if !running.shutdown(grace).await {
        tracing::warn!("requests still in flight after the grace period were cut");
    }
    Ok(())
}

/// `switchyard mock`: the standalone mock server until SIGINT/SIGTERM. A `--spec` file
/// replaces the spec built from the flags.
async fn mock(
    host: std::net::IpAddr,
    port: u16,
    spec_file: Option<&Path>,
    flags: MockSpec,
) -> Result<(), Box<dyn std::error::Error>> {
    let spec = match spec_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            toml::from_str::<MockSpec>(&text)
                .map_err(|e| format!("{}: {}", path.display(), e.message()))?
        }
        None => flags,
    };
    let listener = tokio::net::TcpListener::bind((host, port)).await?;
    let server = MockServer::on(listener, spec, false)?;
    println!("switchyard mock listening on {}", server.base_url());
    stop_signal().await?;
    Ok(())
}

/// SIGINT (Ctrl-C) or, on unix, SIGTERM (what service managers send).
async fn stop_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await
}
