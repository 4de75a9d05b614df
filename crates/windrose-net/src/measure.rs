//! What a node measures about its links while it runs: round-trip times (from the proto crate's
//! `LinkProber`) and the throughput its transfers actually got, kept as time series per peer.
//!
//! The series are the model crate's [`windrose_model::measurements`] format (re-exported here),
//! serialised as JSON in node reports and in `windrose bcast --measurements FILE`.
//!
//! [`blake3_bytes_s`] and [`loopback_copy_bytes_s`] measure this machine before a run, to
//! calibrate the finish times a divisible-load scatter predicts.

pub use windrose_model::measurements::{
    LinkMeasurements, Metric, Recorder, Sample, Series, MAX_SAMPLES,
};

/// This machine's BLAKE3 speed in bytes per second: the best of `rounds` single-threaded
/// hashes of `sample` (the compute step of a scatter, as every node runs it). Used to calibrate
/// a scatter's predicted finish times. None when the sample is empty or the clock too coarse.
pub fn blake3_bytes_s(sample: &[u8], rounds: usize) -> Option<f64> {
    if sample.is_empty() {
        return None;
    }
    let best = (0..rounds.max(1))
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(blake3::hash(std::hint::black_box(sample)));
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    (best > 0.0).then(|| sample.len() as f64 / best)
}

/// Throughput of a plain TCP copy of `bytes` bytes over loopback (127.0.0.1), in bytes per
/// second: one connection, 1 MiB writes, the receiver dropping what it reads; timed from the
/// accepted connection to the last byte. Calibrates scatter predictions for groups on loopback
/// (`windrose local --scatter`).
pub async fn loopback_copy_bytes_s(bytes: usize) -> std::io::Result<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let sender = tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let chunk = vec![0x5au8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len());
            s.write_all(&chunk[..n]).await?;
            left -= n;
        }
        s.shutdown().await
    });
    let (mut r, _) = listener.accept().await?;
    let start = std::time::Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0;
    while got < bytes {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the loopback sender closed early",
            ));
        }
        got += n;
    }
    let secs = start.elapsed().as_secs_f64();
    sender.await.map_err(std::io::Error::other)??;
    Ok(bytes as f64 / secs.max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_speeds_are_positive() {
        assert!(blake3_bytes_s(&[7u8; 1 << 20], 2).unwrap() > 0.0);
        assert_eq!(blake3_bytes_s(&[], 2), None);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert!(rt.block_on(loopback_copy_bytes_s(4 << 20)).unwrap() > 0.0);
    }
}
