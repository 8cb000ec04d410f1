//! Retention: what is pruned, and when.

use super::*;

/// Retention forgets audit entries past the audit retention and unused
/// tickets past their expiry, beside mail: the one owner of all of it.
#[test]
fn retention_prunes_the_audit_log_and_tickets_too() {
    let t = team();
    let mut d = desk();
    let day = 24 * 3600 * 1000;
    let old = AuditEntry {
        at: T0 - 91 * day,
        event: "accepted".into(),
        ..AuditEntry::default()
    };
    let recent = AuditEntry {
        at: T0 - day,
        event: "accepted".into(),
        ..AuditEntry::default()
    };
    d.store.audit_many(&[old, recent]).unwrap();
    use crate::store::TeamStore;
    d.store
        .put_ticket(&[1; 16], Timestamp::from_unix_millis(T0 - 1))
        .unwrap();
    d.store
        .put_ticket(&[2; 16], Timestamp::from_unix_millis(T0 + day))
        .unwrap();
    let t0 = Instant::now();
    let mut retention = retention::Retention::new(Duration::from_secs(90 * 24 * 3600), t0);
    assert!(
        !retention.due(t0),
        "the first sweep is one period after start"
    );
    assert!(retention.due(t0 + Duration::from_secs(600)));
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0, t0),
    };
    retention.run(&mut Courier::default(), &mut Consent::default(), &mut ctx);
    let left = d
        .store
        .audit_since(Timestamp::from_unix_millis(0), 10)
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].at, T0 - day);
    assert!(d.store.ticket(&[1; 16]).unwrap().is_none());
    assert!(d.store.ticket(&[2; 16]).unwrap().is_some());
    assert!(!retention.due(t0 + Duration::from_secs(599)));
    assert!(retention.due(t0 + Duration::from_secs(600)));
}
