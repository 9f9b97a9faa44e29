//! `--autorenew` on every scheme: a lock with a short ttl stays held, and
//! out of others' reach, through a command that runs for several ttls;
//! and when the lock is lost all the same (broken from outside), the
//! command gets the lost signal and lockctl exits 75.

mod common;

use std::time::{Duration, Instant, SystemTime};

use common::*;

/// How long the commands here outlive their one-second ttl.
const SEVERAL_TTLS: Duration = Duration::from_millis(2500);

#[test]
fn autorenew_keeps_a_short_ttl_lock_through_a_longer_command() {
    each_scheme("autorenew", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let holder = Holder::start(dir, &spec, &["--ttl", "1s", "--autorenew"]);
        let start = Instant::now();
        let mut attempts = 0;
        while start.elapsed() < SEVERAL_TTLS {
            let out = lockctl_run(&["run", "-n", &spec, "true"]);
            assert_eq!(
                out.code(),
                CONFLICT,
                "{spec}: taken from a renewed holder after {:?}: {out:?}",
                start.elapsed()
            );
            attempts += 1;
        }
        assert!(attempts > 1);
        let (code, json) = status_json(&spec);
        assert_eq!(code, CONFLICT, "{json:?}");
        let held_by = json.get("holder");
        assert_eq!(held_by.get("pid").u64(), u64::from(holder.pid()));
        assert_eq!(held_by.get("stale"), &Json::Bool(false));
        if scheme.breaks_stale_locks() {
            // Renewed: its expiry lies ahead, past the first ttl.
            let now_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as u64;
            let expires = held_by.get("expires_unix_ms").u64();
            assert!(expires > now_ms, "{spec}: expired at {expires}, now {now_ms}");
            assert!(expires > held_by.get("since_unix_ms").u64() + 1000, "{held_by:?}");
        }
        let out = holder.release();
        assert_eq!((out.code(), out.stderr.as_str()), (0, ""), "{out:?}");
    });
}

/// What `--autorenew` prevents: without it, a lock that outlives its ttl
/// is taken over, and its holder's run ends with 75. A `flock` lock cannot
/// be taken from a live holder, whatever its ttl.
#[test]
fn without_autorenew_a_lock_past_its_ttl_is_taken_over() {
    let breakable: Vec<Scheme> = Scheme::ALL.iter().copied().filter(|s| s.breaks_stale_locks()).collect();
    each_of("no-autorenew", &breakable, |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let holder = Holder::start(dir, &spec, &["--ttl", "300ms"]);
        wait_until("the lock to be taken over", || lockctl_run(&["run", "-n", &spec, "true"]).code() == 0);
        let out = holder.release();
        assert_eq!(out.code(), TEMP_FAIL, "{out:?}");
        assert!(out.stderr.contains("it ran past the ttl and someone else took the lock"), "{out:?}");
    });
}

#[test]
fn a_lost_lock_stops_the_command_with_the_lost_signal_and_exits_75() {
    let breakable: Vec<Scheme> = Scheme::ALL.iter().copied().filter(|&s| s != Scheme::Flock).collect();
    each_of("lost", &breakable, |scheme, dir| {
        let spec = dir.spec(scheme, "ttl=1s");
        for (options, signal) in [(&[][..], "TERM"), (&["--lost-signal", "USR1"][..], "USR1")] {
            let (got, ready) = (dir.join(&format!("got-{signal}")), dir.join(&format!("ready-{signal}")));
            let child = lockctl()
                .args(["run", "--autorenew"])
                .args(options)
                .args([&spec, "--", "sh", "-c", TRAPPING, "sh"])
                .args([got.as_os_str(), ready.as_os_str(), signal.as_ref()])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            wait_until("the command to run", || ready.exists());
            let broke = lockctl_run(&["break", &spec]);
            assert_eq!(broke.code(), 0, "{broke:?}");
            let out = finish(child);
            assert_eq!(out.code(), TEMP_FAIL, "{spec}: {out:?}");
            assert_eq!(std::fs::read_to_string(&got).unwrap(), format!("{signal}\n"), "the command's signal");
            let said = format!("lost '{spec}' while the command ran: it was broken, or someone else holds it now; the command was sent SIG{signal}");
            assert!(out.stderr.contains(&said), "{out:?}");
        }
    });
}
