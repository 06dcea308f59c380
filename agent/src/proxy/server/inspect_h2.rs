//! HTTP/2 inside an inspected connection (issue 60). The proxy speaks
//! HTTP/2 to the client only when the upstream agreed to it too (ALPN
//! `h2` on both sides, the upstream asked first): each stream the client
//! opens is judged as an HTTP/1.1 request is (its `:authority` must name
//! the host, then the request rules and the placeholders in the path and
//! the headers, the body through the same rewriter), and goes upstream as
//! a stream of the one upstream connection. Answers stream back as they
//! come, masked as HTTP/1.1 answers are; each stream is recorded
//! (`via: inspected`), with the rule that allowed it. The h2 crate does
//! the framing, HPACK and flow control.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;

use super::forward::{refused_inside, with_rule};
use super::{printable, Refusal, Shared};
use crate::audit::{ProxyVerdict, ProxyVia};
use crate::proxy::inspector::{BodyRewriter, Refused};
use crate::proxy::request::{parse_authority, Target, FORWARDABLE, MAX_HEAD};

/// Streams one client connection may have open at once.
const MAX_STREAMS: u32 = 128;

/// Where the streams of one connection go, and by which rule.
struct Route {
    target: Target,
    dialed: SocketAddr,
    allowed_by: String,
}

/// Relay the streams of `client` (HTTP/2 agreed) to `upstream` (HTTP/2
/// agreed), until either side ends the connection or it idles.
pub(super) async fn relay<C, U>(
    shared: &Arc<Shared>,
    client: C,
    upstream: U,
    target: &Target,
    dialed: SocketAddr,
    allowed_by: &str,
) where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let route = Arc::new(Route {
        target: target.clone(),
        dialed,
        allowed_by: allowed_by.to_owned(),
    });
    let fail = |why: String| {
        shared.record_via(
            "",
            Some(target),
            Some(dialed),
            ProxyVerdict::UpstreamFailed,
            format!("{allowed_by}; upstream: {why}"),
            0,
            Some(ProxyVia::Inspected),
        );
    };
    let up = tokio::time::timeout(
        shared.connect_timeout,
        h2::client::Builder::new()
            .max_header_list_size(MAX_HEAD as u32)
            .handshake::<_, Bytes>(upstream),
    )
    .await;
    let (sender, up_conn) = match up {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => return fail(format!("HTTP/2 with {} failed: {e}", target.host)),
        Err(_) => return fail(format!("HTTP/2 with {} did not start", target.host)),
    };
    let accepted = tokio::time::timeout(
        shared.head_timeout,
        h2::server::Builder::new()
            .max_concurrent_streams(MAX_STREAMS)
            .max_header_list_size(MAX_HEAD as u32)
            .handshake::<_, Bytes>(client),
    )
    .await;
    let Ok(Ok(mut server)) = accepted else {
        let why = format!(
            "the client's HTTP/2 preface for {} did not come",
            target.host
        );
        shared.record_via(
            "",
            Some(target),
            None,
            ProxyVerdict::BadRequest,
            why,
            400,
            Some(ProxyVia::Inspected),
        );
        return;
    };
    let mut up_conn = std::pin::pin!(up_conn);
    let mut up_open = true;
    let mut closing = false;
    let mut streams = JoinSet::new();
    let idle = tokio::time::sleep(shared.idle);
    let mut idle = std::pin::pin!(idle);
    loop {
        tokio::select! {
            next = server.accept() => match next {
                Some(Ok((req, respond))) => {
                    streams.spawn(stream(
                        Arc::clone(shared),
                        Arc::clone(&route),
                        req,
                        respond,
                        sender.clone(),
                    ));
                }
                // The client's connection ended (or broke: its streams
                // end with it).
                Some(Err(_)) | None => break,
            },
            _ = &mut up_conn, if up_open => {
                // The upstream ended its connection: no new stream can go;
                // the client is told to open another connection.
                up_open = false;
                closing = true;
                server.graceful_shutdown();
            }
            Some(_) = streams.join_next() => {
                if streams.is_empty() {
                    idle.as_mut().reset(tokio::time::Instant::now() + shared.idle);
                }
            }
            () = &mut idle, if streams.is_empty() && !closing => {
                closing = true;
                server.graceful_shutdown();
            }
        }
    }
    streams.abort_all();
}

/// A copy of a header map as the inspector reads headers: name, value.
fn as_pairs(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

/// The header map of `pairs` (as the inspector left them), without `Host`
/// (`:authority` carries it).
fn from_pairs(pairs: Vec<(String, Vec<u8>)>) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::with_capacity(pairs.len());
    for (n, v) in pairs {
        if n.eq_ignore_ascii_case("host") {
            continue;
        }
        let name = HeaderName::from_bytes(n.as_bytes()).map_err(|e| format!("header {n}: {e}"))?;
        let value = HeaderValue::from_bytes(&v).map_err(|e| format!("header {n}: {e}"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// Answer a stream with `refusal`, and record it.
fn answer(
    shared: &Shared,
    route: &Route,
    method: &str,
    refusal: &Refusal,
    mut respond: SendResponse<Bytes>,
) {
    let dialed = refusal.allowed_by.is_some().then_some(route.dialed);
    let said = match &refusal.allowed_by {
        Some(_) => format!("upstream: {}", refusal.reason),
        None => refusal.reason.clone(),
    };
    shared.record_via(
        method,
        Some(&route.target),
        dialed,
        refusal.verdict,
        refusal.recorded(),
        refusal.status,
        Some(ProxyVia::Inspected),
    );
    let clean = printable(&said);
    let head = Response::builder()
        .status(refusal.status)
        .header("content-type", "text/plain")
        .header("x-lockrun-reason", clean.as_str())
        .body(());
    if let Ok(head) = head {
        if let Ok(mut body) = respond.send_response(head, false) {
            let _ = body.send_data(Bytes::from(format!("lockrun proxy: {clean}\n")), true);
        }
    }
}

/// Why a body stopped going through.
enum Cut {
    /// The inspector refused what it carried.
    Refused(Refused),
    /// Its sender reset it or its connection broke.
    Read(h2::Error),
    /// Its receiver reset it or its connection broke.
    Write(h2::Error),
}

/// Send all of `data` as the receiver's window allows.
async fn send_all(to: &mut SendStream<Bytes>, mut data: Bytes) -> Result<(), h2::Error> {
    while !data.is_empty() {
        to.reserve_capacity(data.len());
        let granted = match poll_fn(|cx| to.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(e),
            None => return Err(h2::Reason::CANCEL.into()),
        };
        if granted > 0 {
            to.send_data(data.split_to(granted.min(data.len())), false)?;
        }
    }
    Ok(())
}

/// Pass a body on, each chunk through `rewrite` when there is one, then its
/// trailers through `trailers` (or its end).
async fn pump(
    mut from: RecvStream,
    to: &mut SendStream<Bytes>,
    mut rewrite: Option<BodyRewriter>,
    trailers: impl FnOnce(&mut HeaderMap) -> Result<(), Refused>,
) -> Result<(), Cut> {
    while let Some(chunk) = from.data().await {
        let chunk = chunk.map_err(Cut::Read)?;
        let n = chunk.len();
        let data = match rewrite.as_mut() {
            Some(r) => {
                let mut out = Vec::with_capacity(n);
                r.feed(&chunk, &mut out).map_err(Cut::Refused)?;
                Bytes::from(out)
            }
            None => chunk,
        };
        send_all(to, data).await.map_err(Cut::Write)?;
        let _ = from.flow_control().release_capacity(n);
    }
    if let Some(r) = rewrite.as_mut() {
        let mut out = Vec::new();
        r.finish(&mut out).map_err(Cut::Refused)?;
        send_all(to, Bytes::from(out)).await.map_err(Cut::Write)?;
    }
    match from.trailers().await.map_err(Cut::Read)? {
        Some(mut t) => {
            trailers(&mut t).map_err(Cut::Refused)?;
            to.send_trailers(t).map_err(Cut::Write)
        }
        None => to.send_data(Bytes::new(), true).map_err(Cut::Write),
    }
}

/// One stream of the client: judged, sent upstream, its answer relayed.
#[allow(clippy::too_many_lines)] // the gates in order, each with its refusal
async fn stream(
    shared: Arc<Shared>,
    route: Arc<Route>,
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    sender: h2::client::SendRequest<Bytes>,
) {
    let (parts, body) = req.into_parts();
    let method = parts.method.as_str().to_owned();
    let target = &route.target;
    let bad = |status: u16, reason: String| Refusal {
        status,
        reason,
        verdict: ProxyVerdict::BadRequest,
        allowed_by: None,
    };
    if !FORWARDABLE.contains(&method.as_str()) {
        let why = format!("method {method} is not relayed inside an inspected connection");
        return answer(&shared, &route, &method, &bad(405, why), respond);
    }
    let authority = parts.uri.authority().map(http::uri::Authority::as_str);
    let names_host = authority
        .and_then(|a| parse_authority(a, Some(target.port)).ok())
        .is_some_and(|t| t == *target);
    if !names_host {
        let why = format!(
            "the request names {}, not {target}, the host of its connection",
            authority.unwrap_or("no host")
        );
        return answer(&shared, &route, &method, &bad(421, why), respond);
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str)
        .to_owned();
    let mut headers = as_pairs(&parts.headers);
    let judged = match shared
        .inspector
        .judge(&target.host, &method, &path, &mut headers)
    {
        Ok(j) => j,
        Err(r) => return answer(&shared, &route, &method, &refused_inside(r), respond),
    };
    let allowed = with_rule(&route.allowed_by, &judged);
    let upstream_failed = |why: String| Refusal {
        status: 502,
        reason: why,
        verdict: ProxyVerdict::UpstreamFailed,
        allowed_by: Some(allowed.clone()),
    };
    let sent_path = judged.path.clone().unwrap_or(path.clone());
    let built = from_pairs(headers).and_then(|h| {
        let uri = http::Uri::builder()
            .scheme("https")
            .authority(authority.unwrap_or_default())
            .path_and_query(sent_path.as_str())
            .build()
            .map_err(|e| e.to_string())?;
        let mut out = Request::builder()
            .method(parts.method.clone())
            .uri(uri)
            .body(())
            .map_err(|e| e.to_string())?;
        *out.headers_mut() = h;
        Ok(out)
    });
    let out = match built {
        Ok(o) => o,
        Err(why) => return answer(&shared, &route, &method, &bad(400, why), respond),
    };
    let mut sender = match sender.ready().await {
        Ok(s) => s,
        Err(e) => {
            let why = format!("HTTP/2 with {} failed: {e}", target.host);
            return answer(&shared, &route, &method, &upstream_failed(why), respond);
        }
    };
    let ends = body.is_end_stream();
    let (response, mut up_body) = match sender.send_request(out, ends) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("HTTP/2 with {} failed: {e}", target.host);
            return answer(&shared, &route, &method, &upstream_failed(why), respond);
        }
    };
    // The request's body goes up beside its answer coming down (a stream
    // may be both ways at once).
    let going_up = (!ends).then(|| {
        let (inspector, host, method, path) = (
            Arc::clone(&shared.inspector),
            target.host.clone(),
            method.clone(),
            path.clone(),
        );
        tokio::spawn(async move {
            let judge_trailers = |t: &mut HeaderMap| {
                let mut pairs = as_pairs(t);
                inspector.judge(&host, &method, &path, &mut pairs)?;
                *t = from_pairs(pairs).map_err(|why| Refused {
                    status: 400,
                    reason: why,
                    verdict: ProxyVerdict::BadRequest,
                })?;
                Ok(())
            };
            let r = pump(body, &mut up_body, judged.body, judge_trailers).await;
            if r.is_err() {
                up_body.send_reset(h2::Reason::CANCEL);
            }
            r
        })
    });
    let answered = response.await;
    let answered = match answered {
        Ok(a) => a,
        Err(e) => {
            // A body the inspector refused is why, when it was.
            let refusal = match going_up {
                Some(up) => match up.await {
                    Ok(Err(Cut::Refused(r))) => refused_inside(r),
                    _ => upstream_failed(format!("{} answered no head: {e}", target.host)),
                },
                None => upstream_failed(format!("{} answered no head: {e}", target.host)),
            };
            return answer(&shared, &route, &method, &refusal, respond);
        }
    };
    let (mut head, down) = answered.into_parts();
    let status = head.status.as_u16();
    let masker = shared.inspector.masker(&target.host);
    if masker.is_some() {
        let mut pairs = as_pairs(&head.headers);
        shared.inspector.mask_headers(&target.host, &mut pairs);
        match from_pairs(pairs) {
            Ok(h) => head.headers = h,
            Err(why) => {
                let why = format!("{}'s answer: {why}", target.host);
                return answer(&shared, &route, &method, &upstream_failed(why), respond);
            }
        }
    }
    let ends = down.is_end_stream();
    let back = Response::from_parts(head, ());
    let Ok(mut to_client) = respond.send_response(back, ends) else {
        // The client reset the stream: recorded as cut short.
        shared.record_via(
            &method,
            Some(target),
            Some(route.dialed),
            ProxyVerdict::Allowed,
            format!("{allowed}; relay cut short: the client reset the stream"),
            status,
            Some(ProxyVia::Inspected),
        );
        return;
    };
    let inspector = Arc::clone(&shared.inspector);
    let host = target.host.clone();
    let mask_trailers = |t: &mut HeaderMap| {
        let mut pairs = as_pairs(t);
        inspector.mask_headers(&host, &mut pairs);
        if let Ok(h) = from_pairs(pairs) {
            *t = h;
        }
        Ok(())
    };
    let down_result = if ends {
        Ok(())
    } else {
        pump(down, &mut to_client, masker, mask_trailers).await
    };
    let up_result = match going_up {
        Some(up) => up.await.unwrap_or(Ok(())),
        None => Ok(()),
    };
    if down_result.is_err() {
        to_client.send_reset(h2::Reason::CANCEL);
    }
    let (verdict, reason) = match (up_result, down_result) {
        (Err(Cut::Refused(r)), _) | (_, Err(Cut::Refused(r))) => (r.verdict, r.reason),
        (Ok(()), Ok(())) => (ProxyVerdict::Allowed, allowed),
        (Err(Cut::Read(e)), _) => (
            ProxyVerdict::Allowed,
            format!("{allowed}; relay cut short: the client's body: {e}"),
        ),
        (Err(Cut::Write(e)), _) => (
            ProxyVerdict::Allowed,
            format!("{allowed}; relay cut short: sending the body up: {e}"),
        ),
        (_, Err(Cut::Read(e))) => (
            ProxyVerdict::Allowed,
            format!("{allowed}; relay cut short: the answer's body: {e}"),
        ),
        (_, Err(Cut::Write(e))) => (
            ProxyVerdict::Allowed,
            format!("{allowed}; relay cut short: sending the answer down: {e}"),
        ),
    };
    shared.record_via(
        &method,
        Some(target),
        Some(route.dialed),
        verdict,
        reason,
        status,
        Some(ProxyVia::Inspected),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_go_through_the_inspectors_form_and_back_without_host() {
        let mut map = HeaderMap::new();
        map.append("x-api-key", HeaderValue::from_static("ph"));
        map.append("accept", HeaderValue::from_static("a"));
        map.append("accept", HeaderValue::from_static("b"));
        let mut pairs = as_pairs(&map);
        pairs.push(("host".into(), b"api.test".to_vec()));
        let back = from_pairs(pairs).unwrap_or_default();
        assert_eq!(back.get_all("accept").iter().count(), 2);
        assert_eq!(
            back.get("x-api-key").map(HeaderValue::as_bytes),
            Some(&b"ph"[..])
        );
        assert!(back.get("host").is_none());
        // A value the inspector left that no header may carry is said so.
        let err = from_pairs(vec![("x".into(), b"a\nb".to_vec())]).unwrap_err();
        assert!(err.starts_with("header x"), "{err}");
    }
}
