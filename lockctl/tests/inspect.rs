//! `lockctl status`, `break` and `wait` on every scheme: what they print
//! of a free and a held lock, their exit statuses, and that none of them
//! takes the lock.

mod common;

use common::*;

/// The keys every `status --json` object has, whatever the lock's state.
const KEYS: &[&str] = &[
    "available",
    "cooldown_until",
    "cooldown_until_unix_ms",
    "holder",
    "last_fence",
    "path",
    "queue_length",
    "scheme",
    "spec",
    "state",
];
const HOLDER_KEYS: &[&str] =
    &["expires", "expires_unix_ms", "fence", "host", "liveness", "pid", "since", "since_unix_ms", "stale"];

#[test]
fn status_of_a_free_lock_exits_0_and_says_free() {
    each_scheme("status-free", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let (code, json) = status_json(&spec);
        assert_eq!(code, 0, "{json:?}");
        assert_eq!(json.keys(), KEYS);
        assert_eq!(json.get("spec").str(), spec);
        assert_eq!(json.get("scheme").str(), scheme.name());
        assert_eq!(json.get("state").str(), "free");
        assert_eq!(json.get("available"), &Json::Bool(true));
        assert_eq!(json.get("holder"), &Json::Null);
        let lock_path = match scheme {
            Scheme::Lockfile => dir.join("lock.lock"),
            _ => dir.join("lock"),
        };
        if scheme.target_kind() == lockcore::TargetKind::Url {
            assert_eq!(json.get("path"), &Json::Null, "a lock on a server is no path");
        } else {
            assert_eq!(json.get("path").str(), lock_path.to_str().unwrap());
        }
        let out = lockctl_run(&["status", &spec]);
        assert_eq!(out.code(), 0);
        assert!(out.stdout.contains("state:      free\n"), "{out:?}");
    });
}

#[test]
fn status_of_a_held_lock_exits_1_and_names_the_holder_and_its_fence() {
    each_scheme("status-held", |scheme, dir| {
        let spec = dir.spec(scheme, "ttl=1h");
        let holder = Holder::start(dir, &spec, &[]);
        let (code, json) = status_json(&spec);
        assert_eq!(code, CONFLICT, "{json:?}");
        assert_eq!(json.keys(), KEYS);
        assert_eq!(json.get("state").str(), "held");
        assert_eq!(json.get("available"), &Json::Bool(false));
        assert_eq!(json.get("last_fence").u64(), holder.fence, "{json:?}");
        let held_by = json.get("holder");
        assert_eq!(held_by.keys(), HOLDER_KEYS);
        assert_eq!(held_by.get("pid").u64(), u64::from(holder.pid()));
        assert_eq!(held_by.get("fence").u64(), holder.fence);
        assert_eq!(held_by.get("liveness").str(), "alive");
        assert_eq!(held_by.get("stale"), &Json::Bool(false));
        let since = held_by.get("since_unix_ms").u64();
        let expires = held_by.get("expires_unix_ms").u64();
        // The expiry is the boot clock's, shown on the wall clock as seen
        // now: within a second of an hour after the wall-clock start.
        assert!(expires.abs_diff(since + 3_600_000) < 1000, "{held_by:?}: the ttl is an hour");
        // Every scheme has a queue (the turnstile, or toplock's own): the holder.
        assert_eq!(json.get("queue_length").u64(), 1);

        let out = lockctl_run(&["status", &spec]);
        assert_eq!(out.code(), CONFLICT);
        for line in [
            "state:      held\n".to_owned(),
            format!("holder:     pid {} on ", holder.pid()),
            format!("fence:      {}\n", holder.fence),
            "expires:    ".to_owned(),
        ] {
            assert!(out.stdout.contains(&line), "{line:?} in {}", out.stdout);
        }
        assert_eq!(holder.release().code(), 0);
        assert_eq!(status_json(&spec).0, 0);
    });
}

#[test]
fn break_removes_a_held_lock_and_its_holder_learns_it_lost_the_lock() {
    let breakable: Vec<Scheme> = Scheme::ALL.iter().copied().filter(|&s| s != Scheme::Flock).collect();
    each_of("break", &breakable, |scheme, dir| {
        // With a ttl far off, and with none: either way the lock was
        // broken, not run past its ttl.
        for query in ["ttl=1h", ""] {
            broken_while_held(dir, &dir.spec(scheme, query));
        }
    });
}

/// Breaks the lock `spec` while a `lockctl run` holds it: the holder's run
/// ends with 75, told its lock was broken.
fn broken_while_held(dir: &TestDir, spec: &str) {
    let holder = Holder::start(dir, spec, &[]);
    let out = lockctl_run(&["break", spec]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.starts_with(&format!("broke '{spec}', held by pid {}", holder.pid())), "{out:?}");
    // Free now: another run takes it, with a greater fence.
    let out = lockctl_run(&["run", "-n", spec, "-c", "echo $LOCK_FENCE"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.trim().parse::<u64>().unwrap() > holder.fence);
    // The holder's release finds its record gone: the run was unprotected.
    let released = holder.release();
    assert_eq!(released.code(), TEMP_FAIL, "{released:?}");
    let said = format!("lost '{spec}' while the command ran: it was broken or its file removed");
    assert!(released.stderr.contains(&said), "{released:?}");

    let out = lockctl_run(&["break", spec]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, format!("'{spec}' was not held: nothing to break\n"));
}

/// The kernel's flock lock ends only with its holder.
#[test]
fn break_of_a_flock_lock_says_it_cannot_be_broken() {
    let dir = TestDir::new("break-flock");
    let spec = dir.spec(Scheme::Flock, "");
    let holder = Holder::start(&dir, &spec, &[]);
    let out = lockctl_run(&["break", &spec]);
    assert_eq!(out.code(), UNAVAILABLE, "{out:?}");
    assert!(
        out.stderr.contains(&format!("cannot break '{spec}'")) && out.stderr.contains("cannot be broken"),
        "{out:?}"
    );
    assert_eq!(lockctl_run(&["run", "-n", &spec, "true"]).code(), CONFLICT, "still held");
    assert_eq!(holder.release().code(), 0);
}

#[test]
fn wait_returns_once_the_holder_lets_go_and_takes_nothing() {
    each_scheme("wait", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let holder = Holder::start(dir, &spec, &[]);
        let out = lockctl_run(&["wait", "-w", "0.3", &spec]);
        assert_eq!(out.code(), CONFLICT, "{out:?}");
        assert!(out.stderr.contains("gave up waiting") && out.stderr.contains("held by pid"), "{out:?}");
        assert_eq!(lockctl_run(&["wait", "-q", "-w", "0.2", "-E", "5", &spec]).code(), 5);

        let mut waiter = lockctl().args(["wait", "-q", &spec]).spawn().unwrap();
        // The lock is held throughout: the waiter cannot have returned.
        assert_eq!(status_json(&spec).0, CONFLICT);
        assert!(waiter.try_wait().unwrap().is_none(), "wait returned while the lock was held");
        let fence = holder.fence;
        assert_eq!(holder.release().code(), 0);
        assert!(wait_exit(&mut waiter).success());
        // Nothing was taken: no fence was drawn, no cooldown started.
        let (code, json) = status_json(&spec);
        assert_eq!((code, json.get("last_fence").u64()), (0, fence), "{json:?}");
        assert_eq!(lockctl_run(&["wait", "-w", "0", &spec]).code(), 0, "a free lock: at once");
    });
}

#[test]
fn wait_takes_a_budget_longer_than_the_clock_can_count_as_no_deadline() {
    each_scheme("wait-huge-budget", |scheme, dir| {
        let spec = dir.spec(scheme, "");
        let out = lockctl_run(&["wait", "-w", &u64::MAX.to_string(), &spec]);
        assert_eq!(out.code(), 0, "a free lock, whatever the budget: {out:?}");
    });
}

#[test]
fn the_json_reader_of_these_tests_reads_what_rfc_8259_allows_and_refuses_the_rest() {
    let value = Json::parse(r#" {"a": [1, -2.5e3, true, null], "b": "x\"\\\/\n\u00e9", "c": {}} "#).unwrap();
    assert_eq!(value.get("b").str(), "x\"\\/\né");
    let expected = vec![Json::Number("1".into()), Json::Number("-2.5e3".into()), Json::Bool(true), Json::Null];
    assert_eq!(value.get("a"), &Json::Array(expected));
    for bad in [r#"{"a":1}x"#, r#"{"a":1,"a":2}"#, "{\"a\":\"\u{1}\"}", r#"{"a":tru}"#, "["] {
        assert!(Json::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn status_json_escapes_a_path_with_quotes_backslashes_and_control_characters() {
    let dir = TestDir::new("json-escape");
    let odd = dir.join("a \"quoted\"\\name\twith tab");
    std::fs::create_dir(&odd).unwrap();
    // In a spec the target is percent-encoded where needed.
    let encoded = odd.to_str().unwrap().replace('%', "%25").replace('\t', "%09").replace('?', "%3F");
    let spec = format!("mkdir:{encoded}/lock");
    let (code, json) = status_json(&spec);
    assert_eq!(code, 0, "{json:?}");
    assert_eq!(json.get("path").str(), odd.join("lock").to_str().unwrap());
    assert_eq!(json.get("spec").str(), spec);
}

#[test]
fn status_text_and_messages_show_control_characters_of_a_path_escaped() {
    // A directory name that would fake a line of the report and send a
    // terminal an escape sequence, were it printed as it is.
    let hostile = "x\nstate:      free\u{1b}]0;title\u{7}";
    let encoded = "x%0Astate:%20%20%20%20%20%20free%1B]0;title%07";
    each_of("control-chars", &file_schemes(), |scheme, dir| {
        std::fs::create_dir(dir.join(hostile)).unwrap();
        let spec = format!("{}:{}/{encoded}/lock", scheme.name(), dir.path().display());
        let out = lockctl_run(&["status", &spec]);
        assert_eq!(out.code(), 0, "{out:?}");
        let states = out.stdout.lines().filter(|line| line.starts_with("state:")).count();
        assert_eq!(states, 1, "one state line: {out:?}");
        assert!(!out.stdout.contains(['\u{1b}', '\u{7}']), "{out:?}");

        let missing = format!("{}:{}/{encoded}/missing/lock", scheme.name(), dir.path().display());
        let out = lockctl_run(&["status", &missing]);
        assert_eq!(out.code(), 66, "{out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "one line: {out:?}");
        assert!(!out.stderr.contains(['\u{1b}', '\u{7}']), "{out:?}");
    });
}

#[test]
fn a_servers_password_never_shows() {
    if !testkit::redis_available() {
        println!("skipped: redis-server is not installed");
        return;
    }
    let server = testkit::Redis::start(&["--requirepass", "s3cret-pw"]);
    let socket = testkit::percent_encode(server.socket().to_str().unwrap());
    for password in ["s3cret-pw", "wrong-pw"] {
        let spec = format!("redis://:{password}@{socket}/shown?ttl=1h");
        let outputs = [
            lockctl_run(&["status", &spec]),
            lockctl_run(&["status", "--json", &spec]),
            lockctl_run(&["run", "-n", &spec, "true"]),
            lockctl_run(&["break", &spec]),
        ];
        for out in outputs {
            let shown = format!("{}{}", out.stdout, out.stderr);
            assert!(!shown.contains(password), "{password} shown: {out:?}");
            // A run that succeeded says nothing; every other names the spec.
            assert!(shown.is_empty() || shown.contains("redis://:***@"), "the spec, its password hidden: {out:?}");
        }
    }
}
