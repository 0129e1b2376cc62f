//! The one HTTP/1.1 client of the tests and tools: [`exchange`] for one request on a fresh
//! connection, [`Conn`] for keep-alive load. Both read the answer the same way
//! (`Content-Length` or chunked).
//!
//! Hand-written on purpose: the hostile cases need the server's answer to a request whose body
//! it stopped reading (a body past its limit), and kept clients report the broken upload
//! instead. [`exchange`] writes from a second thread while it reads, so the answer arrives
//! before the reset the rest of the body provokes can discard it.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use crate::GUARD;

/// An answer: status, head (status line and headers, as text) and body (dechunked).
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Status line and headers.
    pub head: String,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value (the first, name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// The bytes of a request head. `close` asks the server to close after answering.
pub fn request_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body_len: usize,
    close: bool,
) -> Vec<u8> {
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {body_len}\r\n");
    if close {
        head.push_str("Connection: close\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// One exchange on a fresh connection. The status is whatever status line arrived, even if the
/// connection broke afterwards: a `200` line means the server decided to answer 200.
pub fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(GUARD))?;
    stream.set_nodelay(true)?;
    let mut request = request_head(addr, method, path, headers, body.len(), true);
    request.extend_from_slice(body);
    let mut writer = stream.try_clone()?;
    let sending = thread::spawn(move || writer.write_all(&request));
    let mut reader = BufReader::new(stream);
    let answer = read_response(&mut reader, true);
    let wrote = sending
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the writer thread panicked")));
    match answer {
        Ok(response) => Ok(response),
        // No status line: the write's failure says more than the read's, when there is one.
        Err(e) => Err(wrote.err().unwrap_or(e)),
    }
}

/// A keep-alive connection with one request in flight at a time.
#[derive(Debug)]
pub struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    /// Connects; reads wait at most `read_timeout`.
    pub fn open(addr: SocketAddr, read_timeout: Duration) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(read_timeout))?;
        Ok(Conn {
            reader: BufReader::with_capacity(16 << 10, stream),
        })
    }

    /// Sends a request (`head` from [`request_head`], then `body`) and reads the whole answer.
    pub fn send(&mut self, head: &[u8], body: &[u8]) -> std::io::Result<Response> {
        let stream = self.reader.get_mut();
        stream.write_all(head)?;
        stream.write_all(body)?;
        read_response(&mut self.reader, false)
    }
}

/// Reads one answer. With `lenient`, a body cut short (the connection broke after the head)
/// still returns the status and what arrived.
fn read_response(reader: &mut impl BufRead, lenient: bool) -> std::io::Result<Response> {
    let mut head = String::new();
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a status line",
        ));
    }
    let status = line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| std::io::Error::other(format!("not a status line: {line:?}")))?;
    head.push_str(line.trim_end());
    let mut length = None;
    let mut chunked = false;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            if lenient {
                break;
            }
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        head.push('\n');
        head.push_str(l);
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim(), v.trim());
            if k.eq_ignore_ascii_case("content-length") {
                length = Some(v.parse::<usize>().map_err(std::io::Error::other)?);
            } else if k.eq_ignore_ascii_case("transfer-encoding")
                && v.eq_ignore_ascii_case("chunked")
            {
                chunked = true;
            }
        }
    }
    let mut body = Vec::new();
    let read = if chunked {
        read_chunked(reader, &mut body)
    } else if let Some(n) = length {
        body.resize(n, 0);
        let r = reader.read_exact(&mut body);
        if r.is_err() {
            body.clear();
        }
        r
    } else {
        reader.read_to_end(&mut body).map(drop)
    };
    match read {
        Ok(()) => {}
        Err(_) if lenient => {}
        Err(e) => return Err(e),
    }
    Ok(Response { status, head, body })
}

fn read_chunked(reader: &mut impl BufRead, body: &mut Vec<u8>) -> std::io::Result<()> {
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let size = line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size, 16).map_err(std::io::Error::other)?;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                    return Ok(());
                }
            }
        }
        let at = body.len();
        body.resize(at + size, 0);
        reader.read_exact(&mut body[at..])?;
        line.clear();
        reader.read_line(&mut line)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str, lenient: bool) -> std::io::Result<Response> {
        read_response(&mut BufReader::new(raw.as_bytes()), lenient)
    }

    #[test]
    fn reads_a_sized_body_and_leaves_the_next_answer() {
        let raw = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 503 x\r\n";
        let mut reader = BufReader::new(raw.as_bytes());
        let r = read_response(&mut reader, false).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
        assert_eq!(read_response(&mut reader, true).unwrap().status, 503);
    }

    #[test]
    fn dechunks_and_finds_headers() {
        let raw = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\n\
                   transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        let r = parse(raw, false).unwrap();
        assert_eq!(r.status, 503);
        assert_eq!(r.text(), "abcde");
        assert_eq!(r.header("retry-after"), Some("5"));
    }

    #[test]
    fn a_body_cut_short_keeps_the_status_only_when_lenient() {
        let raw = "HTTP/1.1 413 Payload Too Large\r\ncontent-length: 10\r\n\r\nabc";
        assert_eq!(parse(raw, true).unwrap().status, 413);
        assert!(parse(raw, false).is_err());
        assert!(parse("", true).is_err());
    }
}
