//! Test doubles: sink buffers that record every requeue in one shared journal, a store, a guard
//! that journals its release, and a panic hook that keeps injected panics quiet.

use std::any::Any;
use std::sync::{Arc, Mutex, Once};

use ourios_recoverable::{RequeueCause, RequeueTarget};

/// Prefix of every panic message a test injects on purpose.
pub(crate) const INJECTED: &str = "injected panic";

/// Panic on purpose; the message names the point.
pub(crate) fn inject(point: &str) -> ! {
    std::panic::panic_any(format!("{INJECTED}: {point}"))
}

/// Whether a caught payload is one of ours (and not, say, an assertion failure).
pub(crate) fn is_injected(payload: &(dyn Any + Send)) -> bool {
    payload
        .downcast_ref::<String>()
        .is_some_and(|s| s.starts_with(INJECTED))
        || payload
            .downcast_ref::<&str>()
            .is_some_and(|s| s.starts_with(INJECTED))
}

/// Silence the default hook for injected panics only (hundreds of them per proptest run);
/// every other panic is still printed.
pub(crate) fn quiet_injected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !is_injected(info.payload()) {
                default(info);
            }
        }));
    });
}

/// Lock recovering poison: tests inspect buffers a panicking consumer may have poisoned.
pub(crate) use ourios_recoverable::lock;

/// What happened, in order, across both sinks and the guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A target received a requeue.
    Requeued {
        sink: &'static str,
        items: Vec<u32>,
        cause: RequeueCause,
    },
    /// The store accepted a put.
    Put { sink: &'static str, id: u32 },
    /// The publish guard dropped.
    GuardReleased,
}

/// One journal shared by every double of a fixture.
#[derive(Debug, Default)]
pub(crate) struct Journal(Mutex<Vec<Event>>);

impl Journal {
    pub(crate) fn push(&self, event: Event) {
        lock(&self.0).push(event);
    }

    pub(crate) fn events(&self) -> Vec<Event> {
        lock(&self.0).clone()
    }

    /// Only the requeue events.
    pub(crate) fn requeues(&self) -> Vec<Event> {
        self.events()
            .into_iter()
            .filter(|e| matches!(e, Event::Requeued { .. }))
            .collect()
    }
}

/// A sink buffer of item ids implementing the [`RequeueTarget`] contract: recovers a poisoned
/// lock, never panics, puts requeued items ahead (audit) or behind (records).
#[derive(Debug)]
pub(crate) struct Buffer {
    pub(crate) name: &'static str,
    pub(crate) items: Mutex<Vec<u32>>,
    pub(crate) ahead: bool,
    pub(crate) journal: Arc<Journal>,
}

impl Buffer {
    pub(crate) fn new(
        name: &'static str,
        items: Vec<u32>,
        ahead: bool,
        journal: Arc<Journal>,
    ) -> Self {
        Self {
            name,
            items: Mutex::new(items),
            ahead,
            journal,
        }
    }

    /// The buffer's content, sorted.
    pub(crate) fn sorted(&self) -> Vec<u32> {
        let mut v = lock(&self.items).clone();
        v.sort_unstable();
        v
    }
}

impl RequeueTarget<u32> for Buffer {
    fn requeue(&self, items: Vec<u32>, cause: RequeueCause) {
        let mut buf = lock(&self.items);
        if self.ahead {
            buf.splice(0..0, items.iter().copied());
        } else {
            buf.extend(items.iter().copied());
        }
        drop(buf);
        self.journal.push(Event::Requeued {
            sink: self.name,
            items,
            cause,
        });
    }
}

/// The publish guard double: journals its release so tests can see it drops last.
#[derive(Debug)]
pub(crate) struct Guard(pub(crate) Arc<Journal>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.push(Event::GuardReleased);
    }
}
