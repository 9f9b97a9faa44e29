//! Uncontended acquire + release of each strategy, beside its raw floor and
//! its peers, on the default temp directory and on tmpfs (/dev/shm).
//!
//! cargo bench -p bench --bench uncontended
//!
//! One group per strategy and file system (`<scheme>/<fs>`), each with:
//! * `lockcore`: `try_acquire` + `release` on one handle;
//! * `lockcore: try while held`: a `try_acquire` answered busy, another
//!   handle holding the lock: what a caller that polls, or answers "busy"
//!   at once (a CGI's busy page), pays for each look;
//! * `floor: ...`: the system calls the scheme cannot avoid (bench::floor);
//! * `peer: ...`: liblockfile beside `lockfile` (when installed; otherwise
//!   the bench says it is skipped), and beside `flock` the one-host locks
//!   that need no file-system call: a process-shared robust pthread mutex in
//!   a mapped file, and `std::sync::Mutex`.
//!
//! Strategies come from `Scheme::ALL`: a new one is measured with no change
//! here, and gets its floor once one is added to `bench::floor::for_scheme`.
//!
//! A lock kept on a server is measured once per transport instead of once
//! per file system: `redis/tcp` and `redis/unix`, on a redis-server this
//! bench starts, beside the floor of a lock on a server (`SET NX PX` and
//! `DEL`, two round trips on one connection). Without redis-server they are
//! skipped, and the bench says so.

use std::time::Duration;

use bench::redis::{self, RedisServer, Transport};
use bench::{bench_roots, floor, peer, BenchDir};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use lockcore::{Error, Lock, Scheme, TargetKind};

/// `try_acquire` + `release` of the lock `spec` on one handle; a strategy
/// that fails even alone is reported, not benchmarked, so that it does not
/// stop the others.
fn bench_lockcore(group: &mut BenchmarkGroup<'_, WallTime>, id: &str, spec: &str) {
    let mut lock = Lock::open(spec.as_bytes()).expect("spec");
    match lock.try_acquire().map(|_| lock.release(Duration::ZERO)) {
        Ok(Ok(_)) => {
            group.bench_function("lockcore", |b| {
                b.iter(|| {
                    lock.try_acquire().expect("uncontended");
                    lock.release(Duration::ZERO).expect("release");
                })
            });
        }
        failed => eprintln!("WARNING: {id}: lockcore skipped: an uncontended cycle failed: {failed:?}"),
    }
}

/// A `try_acquire` of the lock `spec` answered busy, a second handle
/// holding it; reported, not benchmarked, when the lock cannot be held, or
/// a try is not answered busy.
fn bench_busy_try(group: &mut BenchmarkGroup<'_, WallTime>, id: &str, spec: &str) {
    let mut holder = Lock::open(spec.as_bytes()).expect("spec");
    let mut other = Lock::open(spec.as_bytes()).expect("spec");
    if let Err(e) = holder.try_acquire() {
        eprintln!("WARNING: {id}: try while held skipped: the holder could not take the lock: {e:?}");
        return;
    }
    match other.try_acquire() {
        Err(Error::Busy(_)) => {
            group.bench_function("lockcore: try while held", |b| {
                b.iter(|| assert!(matches!(other.try_acquire(), Err(Error::Busy(_))), "busy while held"))
            });
        }
        answer => eprintln!("WARNING: {id}: try while held skipped: a try was answered {answer:?}"),
    }
    if let Err(e) = holder.release(Duration::ZERO) {
        eprintln!("WARNING: {id}: the holder's release failed: {e:?}");
    }
}

fn uncontended(c: &mut Criterion) {
    if !peer::LIBLOCKFILE {
        eprintln!("{}", peer::LIBLOCKFILE_MISSING);
    }
    for (fs, root) in bench_roots() {
        let dir = BenchDir::new(&root, fs);
        for &scheme in Scheme::ALL.iter().filter(|s| s.target_kind() == TargetKind::Path) {
            let name = scheme.name();
            let mut group = c.benchmark_group(format!("{name}/{fs}"));
            let (id, spec) = (format!("{name}/{fs}"), dir.spec(name, &format!("{name}-lock")));
            bench_lockcore(&mut group, &id, &spec);
            bench_busy_try(&mut group, &id, &spec);
            for (label, make) in floor::for_scheme(name) {
                let mut body = make(&dir.path().join(format!("{name}-floor")));
                group.bench_function(label, |b| b.iter(&mut body));
            }
            match name {
                "lockfile" => match peer::liblockfile_cycle(&dir.path().join("liblockfile.lock")) {
                    Some(mut body) => {
                        group.bench_function("peer: liblockfile create+remove", |b| b.iter(&mut body));
                    }
                    None => eprintln!("{name}/{fs}: {}", peer::LIBLOCKFILE_MISSING),
                },
                "flock" | "shm" => {
                    let robust = peer::RobustMutex::new(&dir.path().join("pthread.shm"));
                    group.bench_function("peer: pthread robust mutex (shared map)", |b| {
                        b.iter(|| {
                            robust.lock();
                            robust.unlock();
                        })
                    });
                    let mutex = std::sync::Mutex::new(0u64);
                    group.bench_function("peer: std::sync::Mutex", |b| {
                        b.iter(|| *mutex.lock().expect("not poisoned") += 1)
                    });
                }
                _ => {}
            }
            group.finish();
        }
    }
    on_servers(c);
}

fn on_servers(c: &mut Criterion) {
    for &scheme in Scheme::ALL.iter().filter(|s| s.target_kind() == TargetKind::Url) {
        let name = scheme.name();
        if name != "redis" {
            eprintln!("{name}: skipped: this bench starts no server for its locks");
            continue;
        }
        let server = match RedisServer::start(Transport::Tcp) {
            Ok(server) => server,
            Err(why) => {
                eprintln!("{name}: skipped: {why}");
                continue;
            }
        };
        for transport in Transport::ALL {
            let id = format!("{name}/{}", transport.name());
            let mut group = c.benchmark_group(&id);
            let spec = server.spec_via(transport, &format!("{name}-lock"), redis::QUERY);
            bench_lockcore(&mut group, &id, &spec);
            bench_busy_try(&mut group, &id, &spec);
            match server.connect_via(transport) {
                Ok(client) => {
                    let mut cycle = redis::set_nx_del_cycle(client, &format!("{name}-floor"));
                    group.bench_function("floor: SET NX PX + DEL (2 round trips)", |b| {
                        b.iter(|| assert!(cycle(), "the floor's key was taken"))
                    });
                }
                Err(e) => eprintln!("WARNING: {id}: floor skipped: cannot reach the server: {e}"),
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = uncontended
}
criterion_main!(benches);
