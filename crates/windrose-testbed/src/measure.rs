//! Measuring a testbed from inside: TCP goodput and round trips between two of its nodes, with
//! threads that enter the nodes' namespaces (so a test or `windrose testbed status --measure`
//! can check that the links give what the scenario says).

use crate::sys::{join, spawn_in_netns};
use crate::TestbedError;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const PORT: u16 = 7399;

fn io_err(what: &str, e: std::io::Error) -> TestbedError {
    TestbedError::Command {
        command: what.to_string(),
        error: e.to_string(),
    }
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Goodput of one TCP connection from namespace `from` to `to_addr` (in namespace `to`),
/// bytes/s, measured at the receiver over `bytes` bytes after a first `warmup` bytes (slow start
/// and the shapers' bursts excluded).
pub fn goodput(
    from: &str,
    to: &str,
    to_addr: Ipv4Addr,
    warmup: u64,
    bytes: u64,
) -> Result<f64, TestbedError> {
    let listener = {
        let l = spawn_in_netns(to, move || TcpListener::bind((to_addr, PORT)))?;
        join(to, l)?.map_err(|e| io_err("listen", e))?
    };
    let receiver = spawn_in_netns(to, move || -> std::io::Result<f64> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0u64;
        let mut start = None;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got += n as u64;
            if start.is_none() && got >= warmup {
                start = Some((Instant::now(), got));
            }
        }
        let (t, at) = start.ok_or_else(|| std::io::Error::other("too few bytes arrived"))?;
        Ok((got - at) as f64 / t.elapsed().as_secs_f64())
    })?;
    let sender = spawn_in_netns(from, move || -> std::io::Result<()> {
        let mut s = connect(SocketAddr::from((to_addr, PORT)))?;
        let chunk = vec![7u8; 1 << 16];
        let mut left = warmup + bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            s.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        s.shutdown(std::net::Shutdown::Write)
    })?;
    join(from, sender)?.map_err(|e| io_err("send", e))?;
    join(to, receiver)?.map_err(|e| io_err("receive", e))
}

/// Round trips of one-byte messages over a TCP connection from namespace `from` to `to_addr`
/// (in namespace `to`): the median of `count`, in seconds.
pub fn round_trip(
    from: &str,
    to: &str,
    to_addr: Ipv4Addr,
    count: usize,
) -> Result<f64, TestbedError> {
    let listener = {
        let l = spawn_in_netns(to, move || TcpListener::bind((to_addr, PORT + 1)))?;
        join(to, l)?.map_err(|e| io_err("listen", e))?
    };
    let echo = spawn_in_netns(to, move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut b = [0u8; 1];
        while s.read(&mut b)? == 1 {
            s.write_all(&b)?;
        }
        Ok(())
    })?;
    let client = spawn_in_netns(from, move || -> std::io::Result<f64> {
        let mut s = connect(SocketAddr::from((to_addr, PORT + 1)))?;
        s.set_nodelay(true)?;
        let mut times = Vec::with_capacity(count);
        let mut b = [1u8; 1];
        for _ in 0..count.max(1) {
            let t = Instant::now();
            s.write_all(&b)?;
            s.read_exact(&mut b)?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    })?;
    let rtt = join(from, client)?.map_err(|e| io_err("round trip", e))?;
    join(to, echo)?.map_err(|e| io_err("echo", e))?;
    Ok(rtt)
}
