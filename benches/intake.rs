//! The intake writer's transaction alone (issue 11): `store::submit_batch` committing
//! batches of new jobs of 1,000 users, on a SQLite file (`synchronous = FULL`, as the
//! service runs it) and, when `FAIRSHARE_BENCH_POSTGRES` names a server, on a fresh
//! PostgreSQL database there. Divan's throughput column is jobs per second.
//!
//!     cargo bench --bench intake
//!     FAIRSHARE_BENCH_POSTGRES=postgres://postgres@127.0.0.1:5432 cargo bench --bench intake

use std::time::Duration;

use divan::counter::ItemsCount;
use divan::Bencher;
use fairshare::config::DatabaseSettings;
use fairshare::store::{self, Db, NewJob};

fn main() {
    divan::main();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

async fn open(url: &str) -> Db {
    let db = store::connect(&DatabaseSettings {
        url: url.to_string(),
        max_connections: 4,
        acquire_timeout: Duration::from_secs(5),
        idle_in_transaction_timeout: Duration::from_secs(10),
        intake_pipeline: 1,
    })
    .await
    .expect("the database opens");
    store::migrate(&db).await.expect("migrations apply");
    db
}

fn batch(size: usize, start: &mut usize) -> Vec<NewJob> {
    (0..size)
        .map(|_| {
            *start += 1;
            NewJob {
                user: format!("u{}", *start % 1000),
                external_id: Some(format!("e{}", *start)),
                priority: 0,
                entrypoint: "python train.py --epochs 10".into(),
                runtime_env: None,
                runtime_env_digest: None,
                runtime_env_digests: Vec::new(),
                metadata: None,
                cpu: 1.0,
                gpu: 0.0,
                memory_bytes: 0,
                custom: Default::default(),
                max_runtime_s: None,
                preemptible: None,
                pool: None,
            }
        })
        .collect()
}

fn bench_on(bencher: Bencher, url: &str, size: usize) {
    let rt = runtime();
    let db = rt.block_on(open(url));
    let mut next = 0;
    bencher
        .counter(ItemsCount::new(size))
        .with_inputs(|| batch(size, &mut next))
        .bench_local_values(|b| {
            let answers = rt.block_on(store::submit_batch(&db, b, u32::MAX));
            assert!(answers.iter().all(Result::is_ok));
        });
}

/// One batch of `size` submissions on a SQLite file.
#[divan::bench(args = [1, 64, 1024], sample_count = 20)]
fn sqlite(bencher: Bencher, size: usize) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}/intake.db?mode=rwc", dir.path().display());
    bench_on(bencher, &url, size);
}

/// One batch of `size` submissions on PostgreSQL (skipped without
/// `FAIRSHARE_BENCH_POSTGRES`).
#[divan::bench(args = [1, 64, 1024], sample_count = 20)]
fn postgres(bencher: Bencher, size: usize) {
    let Ok(server) = std::env::var("FAIRSHARE_BENCH_POSTGRES") else {
        return;
    };
    let rt = runtime();
    let name = format!("fairshare_bench_intake_{}_{size}", std::process::id());
    rt.block_on(async {
        let admin = open_admin(&server).await;
        use sea_orm::ConnectionTrait;
        admin
            .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name}"))
            .await
            .expect("drop");
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create");
    });
    drop(rt);
    bench_on(bencher, &format!("{server}/{name}"), size);
}

async fn open_admin(server: &str) -> Db {
    sea_orm::Database::connect(format!("{server}/postgres"))
        .await
        .expect("the PostgreSQL server answers")
}
