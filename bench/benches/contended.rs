//! Contended acquire + release: N workers, each with its own handle made once
//! and kept across samples, all released together for every sample
//! (`iter_custom`), as threads of this process and as pre-forked processes.
//! The time reported is per acquisition with all N contending (the critical
//! section is empty, so this is the lock's own churn: the contention report,
//! `--bin contention`, holds the lock for a while and measures fairness,
//! handoff and CPU as well).
//!
//! cargo bench -p bench --bench contended
//!
//! Groups: `contended/<scheme>` for each of `Scheme::ALL`, with
//! `threads/N` and `processes/N`; `contended/peers` with the robust pthread
//! mutex (threads and processes) and `std::sync::Mutex` (threads). The
//! locks are files in the default temp directory, and for `redis` keys on a
//! redis-server this bench starts, reached over loopback TCP (skipped, with
//! a line that says so, without redis-server).

use std::sync::Arc;
use std::time::Duration;

use bench::peer::RobustMutex;
use bench::pool::{MakeOp, Mode, Pool};
use bench::redis::Transport;
use bench::Homes;
use criterion::{criterion_group, criterion_main, Criterion};
use lockcore::{Lock, Scheme};

const CONTENDERS: &[usize] = &[2, 4];

fn bench_pool(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, id: &str, mut pool: Pool) {
    group.bench_function(id, |b| b.iter_custom(|iters| pool.run(iters)));
    let failures = pool.failures();
    if failures > 0 {
        eprintln!("WARNING: {id}: {failures} acquisitions failed with an error; its time is not a lock's");
    }
}

fn contended(c: &mut Criterion) {
    let (homes, skipped) = Homes::new(&std::env::temp_dir(), "contended", Scheme::ALL, Transport::Tcp);
    for (scheme, why) in &skipped {
        eprintln!("contended/{}: skipped: {why}", scheme.name());
    }
    for &scheme in Scheme::ALL.iter().filter(|s| !skipped.iter().any(|(skip, _)| skip == *s)) {
        let mut group = c.benchmark_group(format!("contended/{}", scheme.name()));
        for mode in Mode::ALL {
            for &n in CONTENDERS {
                let spec = homes.spec(scheme, &format!("{}-{}-{n}", scheme.name(), mode.name()));
                let make: MakeOp = Arc::new(move |_| {
                    let mut lock = Lock::open(spec.as_bytes()).expect("spec");
                    Box::new(move || {
                        lock.acquire(Some(Duration::from_secs(60))).is_ok_and(|_| lock.release(Duration::ZERO).is_ok())
                    })
                });
                bench_pool(&mut group, &format!("{}/{n}", mode.name()), Pool::new(mode, n, make));
            }
        }
        group.finish();
    }

    let mut group = c.benchmark_group("contended/peers");
    let robust = Arc::new(RobustMutex::new(&homes.dir().path().join("pthread.shm")));
    for mode in Mode::ALL {
        for &n in CONTENDERS {
            let robust = robust.clone();
            let make: MakeOp = Arc::new(move |_| {
                let robust = robust.clone();
                Box::new(move || {
                    robust.lock();
                    robust.unlock();
                    true
                })
            });
            bench_pool(&mut group, &format!("pthread robust mutex {}/{n}", mode.name()), Pool::new(mode, n, make));
        }
    }
    for &n in CONTENDERS {
        let mutex = Arc::new(std::sync::Mutex::new(0u64));
        let make: MakeOp = Arc::new(move |_| {
            let mutex = mutex.clone();
            Box::new(move || {
                *mutex.lock().expect("not poisoned") += 1;
                true
            })
        });
        bench_pool(&mut group, &format!("std::sync::Mutex threads/{n}"), Pool::new(Mode::Threads, n, make));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    targets = contended
}
criterion_main!(benches);
