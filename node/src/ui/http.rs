//! The web page's HTTP side: who may ask (Host, Origin, the secret's
//! cookie, the forms' csrf value), which path is which view, and the
//! headers every answer carries.

use std::convert::Infallible;

use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio_util::sync::CancellationToken;

use super::{Site, assets, chrome, forms, pages};

/// What an answer's body is: whole, or a stream (live updates).
pub type Body = BoxBody<Bytes, Infallible>;

/// The Content-Security-Policy of every answer: the page's own files only,
/// and no inline script.
pub const CSP: &str = "default-src 'self'; script-src 'self'";

/// The most a posted form may hold: a message's text (64 KiB) and the
/// rest, URL-encoded.
const MAX_FORM_BYTES: usize = 256 * 1024;

/// How often the live-update stream says it is alive.
const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// Answers one request.
pub async fn answer(
    req: Request<Incoming>,
    site: &Site,
    cancel: CancellationToken,
) -> Response<Body> {
    if let Err(why) = same_site(&req, site.port) {
        return refuse(StatusCode::FORBIDDEN, why);
    }
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    if req.method() == Method::GET
        && let Some(asset) = assets::get(&path)
    {
        return with_headers(
            Response::builder()
                .header(header::CONTENT_TYPE, asset.content_type)
                .body(whole(asset.bytes))
                .expect("a valid response"),
        );
    }
    let session = cookie(&req, site.port).filter(|s| site.keys.signed_in(s));
    if path == "/" && req.method() == Method::GET {
        return sign_in(&query, session.is_some(), site);
    }
    let Some(session) = session else {
        return refuse(StatusCode::UNAUTHORIZED, NEEDS_SIGN_IN);
    };
    let csrf = site.keys.csrf_of(&session);
    match (req.method().clone(), path.as_str()) {
        (Method::GET, "/events") => events(site, cancel).await,
        (Method::GET, view) => match chrome::View::of(view) {
            Some(v) => page(pages::render(v, &query, site, &csrf).await),
            None => refuse(StatusCode::NOT_FOUND, "no such page"),
        },
        (Method::POST, _) => {
            let typed = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
            if !typed {
                return refuse(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "post the page's own forms",
                );
            }
            let body = match http_body_util::Limited::new(req.into_body(), MAX_FORM_BYTES)
                .collect()
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(_) => return refuse(StatusCode::PAYLOAD_TOO_LARGE, "the form is too large"),
            };
            let form = forms::Form::parse(&body);
            if !form.csrf_is(&csrf) {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "the form lacks the page's csrf value: reload the page and try again",
                );
            }
            match forms::post(&path, form, site, &csrf).await {
                forms::Posted::Done(to) => redirect(&to),
                forms::Posted::Refused(html) => {
                    let mut r = page(html);
                    if r.status() == StatusCode::OK {
                        *r.status_mut() = StatusCode::CONFLICT;
                    }
                    r
                }
                forms::Posted::Failed((status, why)) => refuse(status, &why),
                forms::Posted::NotFound => refuse(StatusCode::NOT_FOUND, "no such form"),
            }
        }
        _ => refuse(StatusCode::METHOD_NOT_ALLOWED, "not here"),
    }
}

/// Whether the request is addressed to this server by its own name: a
/// foreign `Host` is a DNS rebinding, a foreign `Origin` another site.
fn same_site(req: &Request<Incoming>, port: u16) -> Result<(), &'static str> {
    let ours = [format!("127.0.0.1:{port}"), format!("localhost:{port}")];
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    if !host.is_some_and(|h| ours.iter().any(|o| o.eq_ignore_ascii_case(h))) {
        return Err("this page answers only to its own address (http://127.0.0.1:PORT/)");
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !ours
            .iter()
            .any(|o| origin.eq_ignore_ascii_case(&format!("http://{o}")))
        {
            return Err("a request from another site is refused");
        }
    }
    Ok(())
}

fn cookie_name(port: u16) -> String {
    format!("agentmesh_ui_{port}")
}

/// The value of this server's cookie, if the request has it.
fn cookie(req: &Request<Incoming>, port: u16) -> Option<String> {
    let name = cookie_name(port);
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// What a request without a session is told.
const NEEDS_SIGN_IN: &str =
    "this page needs signing in: run `agentmesh ui` on this machine and open the address it gives";

/// What signing in answers: a page of this site that goes on to the
/// peers. (Not a redirect: a sign-in opened from elsewhere — the sign-in
/// file `agentmesh ui` gives the browser, a link in another page — is a
/// cross-site navigation, and a browser sends no `SameSite=Strict` cookie
/// on any step of it; a step this page starts is same-site.)
const SIGNED_IN: &str = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url=/peers\"><title>agentmesh</title></head>\n<body><p>Signed in. <a href=\"/peers\">Go on to the page</a>.</p></body></html>\n";

/// `/?secret=…`: spends the sign-in ticket, keeps a new session in a
/// cookie, and goes on to the peers, at a URL without the ticket.
fn sign_in(query: &str, signed_in: bool, site: &Site) -> Response<Body> {
    let given = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "secret")
        .map(|(_, v)| v.into_owned());
    match given.map(|t| site.keys.redeem(&t)) {
        Some(Some(session)) => {
            let mut r = page(Ok(SIGNED_IN.to_owned()));
            let set = format!(
                "{}={session}; Path=/; HttpOnly; SameSite=Strict",
                cookie_name(site.port)
            );
            if let Ok(v) = HeaderValue::from_str(&set) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        _ if signed_in => redirect("/peers"),
        Some(None) => refuse(
            StatusCode::UNAUTHORIZED,
            "that sign-in address was used already, has expired (they last ten minutes) or is not this page's: run `agentmesh ui` on this machine for a new one",
        ),
        None => refuse(StatusCode::UNAUTHORIZED, NEEDS_SIGN_IN),
    }
}

/// Live updates: one `change` event whenever the daemon's event stream
/// has one (a message, a held message, a decision), a comment every
/// [`KEEPALIVE`] so a dead connection is noticed.
async fn events(site: &Site, cancel: CancellationToken) -> Response<Body> {
    let client = crate::client::Client::attach(&site.home, chrome::who(site), None, None).await;
    let Ok(client) = client else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the daemon is not answering",
        );
    };
    let (requests, mut events) = client.split();
    let stream = async_stream(move |tx| async move {
        // The connection lives while the stream does.
        let _requests = requests;
        let _ = tx.send(Bytes::from_static(b"retry: 2000\n\n")).await;
        loop {
            let line = tokio::select! {
                () = cancel.cancelled() => break,
                e = events.next() => match e {
                    Ok(e) => format!("event: change\ndata: {}\n\n", pages::event_word(&e)),
                    Err(_) => break,
                },
                () = tokio::time::sleep(KEEPALIVE) => ": alive\n\n".to_owned(),
            };
            if tx.send(Bytes::from(line)).await.is_err() {
                break;
            }
        }
    });
    with_headers(
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(BodyExt::boxed(StreamBody::new(
                stream.map(|b| Ok::<_, Infallible>(Frame::data(b))),
            )))
            .expect("a valid response"),
    )
}

/// A stream of what `fill` sends, while it runs (bounded: a slow reader
/// holds `fill` back).
#[expect(
    clippy::disallowed_methods,
    reason = "the filler is the body's: it ends when the body's reader is gone (its next send fails) or its events end"
)]
fn async_stream<F, Fut>(fill: F) -> impl futures::Stream<Item = Bytes> + Send + 'static
where
    F: FnOnce(tokio::sync::mpsc::Sender<Bytes>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(fill(tx));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
}

/// A whole body.
pub fn whole(bytes: impl Into<Bytes>) -> Body {
    BodyExt::boxed(Full::new(bytes.into()))
}

/// An HTML page, or the error of making it.
fn page(html: Result<String, (StatusCode, String)>) -> Response<Body> {
    match html {
        Ok(html) => with_headers(
            Response::builder()
                .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
                .body(whole(html))
                .expect("a valid response"),
        ),
        Err((status, why)) => refuse(status, &why),
    }
}

/// A refusal, in words (plain text: nothing in it can be markup).
pub fn refuse(status: StatusCode, why: &str) -> Response<Body> {
    with_headers(
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(whole(format!("{} {}\n", status.as_u16(), why)))
            .expect("a valid response"),
    )
}

/// See `to`, after a form did what it asked.
fn redirect(to: &str) -> Response<Body> {
    let mut r = with_headers(Response::new(whole(Bytes::new())));
    *r.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// The headers every answer carries: the CSP, no framing, no sniffing,
/// no referrer to other sites (the first URL holds the secret; and a
/// form posted under `no-referrer` would say `Origin: null`), no caching.
fn with_headers(mut r: Response<Body>) -> Response<Body> {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}
