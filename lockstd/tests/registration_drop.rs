//! Dropping a registration that holds the last reference to its item drops
//! the item, and that drop may need the list of registered items itself
//! (the item keeps a registration of its own, or stops a watchdog whose
//! callback registers a lock). Its own binary: a drop that hung with the
//! list locked would leave it locked for every other test in the process.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use lockstd::at_exit::{register, Registration, ReleaseAtExit};

/// An item released at exit that does nothing.
struct Nothing;

impl ReleaseAtExit for Nothing {
    fn release(&self) {}
}

/// An item that owns the registration of another, dropped with it.
struct Owning {
    _inner: Registration,
}

impl ReleaseAtExit for Owning {
    fn release(&self) {}
}

#[test]
fn an_item_dropped_with_its_registration_may_unregister_and_register() {
    let inner = register(Arc::new(Nothing));
    let outer = register(Arc::new(Owning { _inner: inner }));
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        // The last reference to the item goes with its registration: the
        // item's drop unregisters the inner one.
        drop(outer);
        // And the list can still be used afterwards.
        drop(register(Arc::new(Nothing)));
        let _ = done.send(());
    });
    // A bound on a hang, not on speed: the drop takes microseconds.
    let outcome = finished.recv_timeout(Duration::from_secs(30));
    assert!(outcome.is_ok(), "dropping a registration with its item hung: the item was dropped with the list locked");
}
