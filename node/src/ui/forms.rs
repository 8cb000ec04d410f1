//! The page's forms: approve, reject and trust held mail, send and reply
//! as the person. Plain HTML forms (they work without JavaScript), each
//! with the page's `csrf` value, each a local API request like any
//! client's; a failure is shown above the view it came from.

use hyper::StatusCode;
use subtle::ConstantTimeEq;

use super::Site;
use super::chrome::{self, View};
use super::pages;
use crate::api::{MessageView, ResolvedView, SentView, Standing, TeamView, TrustedView, ops};

/// A posted form's fields.
#[derive(Debug, Default)]
pub struct Form {
    csrf: String,
    reason: String,
    text: String,
    to: String,
    reply_to: String,
    ask: bool,
}

impl Form {
    /// The fields of a URL-encoded body (unknown ones ignored).
    pub fn parse(body: &[u8]) -> Form {
        let mut f = Form::default();
        for (k, v) in form_urlencoded::parse(body) {
            let v = v.into_owned();
            match &*k {
                "csrf" => f.csrf = v,
                "reason" => f.reason = v,
                "text" => f.text = v,
                "to" => f.to = v,
                "reply_to" => f.reply_to = v,
                "ask" => f.ask = !v.is_empty(),
                _ => {}
            }
        }
        f
    }

    /// Whether it carries the page's csrf value.
    pub fn csrf_is(&self, csrf: &str) -> bool {
        self.csrf.len() == csrf.len() && bool::from(self.csrf.as_bytes().ct_eq(csrf.as_bytes()))
    }
}

/// What a post came to.
#[derive(Debug)]
pub enum Posted {
    /// It worked: see this address.
    Done(String),
    /// The daemon refused it: the view, with why above it (answered
    /// `409`, at the view's own address for the page's script).
    Refused(Result<String, (StatusCode, String)>),
    /// It could not be done (the daemon is not answering, say).
    Failed((StatusCode, String)),
    /// No form is posted there.
    NotFound,
}

/// What a path posts: a held message's decision, or a message.
enum Action {
    Approve(String),
    Reject(String),
    Trust(String),
    Send,
    Reply,
}

impl Action {
    fn of(path: &str) -> Option<Action> {
        match path {
            "/threads/send" => return Some(Action::Send),
            "/threads/reply" => return Some(Action::Reply),
            _ => {}
        }
        let rest = path.strip_prefix("/held/")?;
        let (id, what) = rest.split_once('/')?;
        if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let id = id.to_owned();
        match what {
            "approve" => Some(Action::Approve(id)),
            "reject" => Some(Action::Reject(id)),
            "trust" => Some(Action::Trust(id)),
            _ => None,
        }
    }

    fn view(&self) -> View {
        match self {
            Action::Send | Action::Reply => View::Threads,
            _ => View::Held,
        }
    }
}

/// Does what the form at `path` asks.
pub async fn post(path: &str, form: Form, site: &Site, csrf: &str) -> Posted {
    let Some(action) = Action::of(path) else {
        return Posted::NotFound;
    };
    let view = action.view();
    // A Send that fails keeps what was typed.
    let draft = matches!(action, Action::Send).then(|| chrome::Draft {
        to: form.to.trim().to_owned(),
        text: form.text.clone(),
        ask: form.ask,
        suggest: None,
    });
    match act(action, form, site).await {
        Ok(done) => Posted::Done(format!("{}?done={done}", view.path())),
        Err((StatusCode::CONFLICT, why)) => {
            Posted::Refused(pages::render_with(view, "", site, csrf, Some(why), draft).await)
        }
        Err(e) => Posted::Failed(e),
    }
}

async fn act(
    action: Action,
    form: Form,
    site: &Site,
) -> Result<&'static str, (StatusCode, String)> {
    let mut c = chrome::connect(site).await?;
    match action {
        Action::Approve(id) => {
            let _: ResolvedView = chrome::call(&mut c, ops::Approve { id }).await?;
            Ok("approved")
        }
        Action::Reject(id) => {
            let reason = form.reason.trim();
            let op = ops::Reject {
                id,
                reason: (!reason.is_empty()).then(|| reason.to_owned()),
            };
            let _: ResolvedView = chrome::call(&mut c, op).await?;
            Ok("rejected")
        }
        Action::Trust(id) => {
            let held: Vec<MessageView> = chrome::call(&mut c, ops::Held).await?;
            let Some(m) = held.iter().find(|m| m.id == id) else {
                return Err((
                    StatusCode::CONFLICT,
                    "that message is no longer held (approved, rejected or expired meanwhile)"
                        .into(),
                ));
            };
            // Trust goes by name: only while the name is still the key
            // that sent this message.
            let machine = pages::machine_of(&m.from).to_owned();
            let team: TeamView = chrome::call(&mut c, ops::TeamShow).await?;
            let same = team.members.iter().any(|t| {
                t.name == machine && t.peer_id == m.from_peer && t.standing == Standing::Current
            });
            if !same {
                return Err((
                    StatusCode::CONFLICT,
                    format!(
                        "{machine} is no longer the machine that sent this message (it left, was revoked, or its name is another key's now); reject it instead"
                    ),
                ));
            }
            let _: TrustedView = chrome::call(
                &mut c,
                ops::Trust {
                    machine,
                    off: false,
                    approve_held: false,
                },
            )
            .await?;
            Ok("trusted")
        }
        Action::Send => {
            let op = ops::Send {
                to: form.to.trim().to_owned(),
                text: form.text,
                ask: form.ask,
                reply_to: None,
                from_mailbox: None,
                wait_first_answer_ms: None,
            };
            person_spoke(&mut c).await;
            let _: SentView = chrome::call(&mut c, op).await?;
            Ok("sent")
        }
        Action::Reply => {
            let op = ops::Send {
                to: String::new(),
                text: form.text,
                ask: false,
                reply_to: Some(form.reply_to),
                from_mailbox: None,
                wait_first_answer_ms: None,
            };
            person_spoke(&mut c).await;
            let _: SentView = chrome::call(&mut c, op).await?;
            Ok("sent")
        }
    }
}

/// The person writes: what the owner's mailbox sends is hop 0 again, as
/// at a terminal.
async fn person_spoke(c: &mut crate::client::Client) {
    let _ = c
        .call(ops::HopReset {
            mailbox: Some("@".into()),
        })
        .await;
}
