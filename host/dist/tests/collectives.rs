//! Two ranks (threads of this test, each its own gloo group over one TCPStore) exchange what
//! a training step exchanges; every collective's result is checked against its definition.

use std::time::Duration;
use tch::{Device, Kind, Tensor};
use vagen_dist::{DistributedConfig, Ranks, Rendezvous};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs `f(ranks)` on `world` ranks at once; their results in rank order.
fn on_ranks<T: Send + 'static>(world: usize, f: impl Fn(Ranks) -> T + Send + Sync + Copy + 'static) -> Vec<T> {
    let port = free_port();
    let handles: Vec<_> = (0..world)
        .map(|rank| {
            std::thread::spawn(move || {
                let rdzv = Rendezvous::local(rank, world, port, "test");
                let cfg = DistributedConfig { timeout_s: 30.0, ..Default::default() };
                f(Ranks::join(&rdzv, &cfg, Device::Cpu).unwrap())
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn gathers_sums_and_shards_equal_their_definitions() {
    let out = on_ranks(2, |ranks| {
        let r = ranks.rank();
        // Different lengths, an empty one included.
        let mine: Vec<u8> = (0..(r * 5) as u8).collect();
        let gathered = ranks.gather_bytes(&mine).unwrap();
        let mut sums = [r as f64 + 0.5, 1e-17 * (r + 1) as f64];
        ranks.sum(&mut sums).unwrap();
        let mut t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]) * (r + 1) as f64;
        ranks.sum_tensor(&mut t, "test").unwrap();
        let input = Tensor::from_slice(&[10.0f32, 20.0, 30.0, 40.0]) + r as f64;
        let mut slice = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        ranks.reduce_scatter(&mut slice, &input, "test").unwrap();
        let mut whole = Tensor::zeros([4], (Kind::Float, Device::Cpu));
        ranks.all_gather(&mut whole, &slice, "test").unwrap();
        let mut b = Tensor::from_slice(&[r as f32 + 7.0]);
        ranks.broadcast(&mut b, 1, "test").unwrap();
        ranks.barrier("test").unwrap();
        ranks.finish();
        let v = |t: &Tensor| Vec::<f32>::try_from(t).unwrap();
        (gathered, sums, v(&t), v(&slice), v(&whole), v(&b))
    });
    for (r, (gathered, sums, t, slice, whole, b)) in out.into_iter().enumerate() {
        assert_eq!(gathered, vec![vec![], (0..5).collect::<Vec<u8>>()]);
        assert_eq!(sums, [2.0, 3e-17], "f64 sums keep small values exact");
        assert_eq!(t, [3.0, 6.0, 9.0, 12.0]);
        // Sum of [10,20,30,40] and [11,21,31,41], rank r's half.
        assert_eq!(slice, [[21.0, 41.0], [61.0, 81.0]][r]);
        assert_eq!(whole, [21.0, 41.0, 61.0, 81.0]);
        assert_eq!(b, [8.0]);
    }
}

#[test]
fn one_rank_needs_no_group() {
    let ranks = Ranks::single();
    assert_eq!((ranks.rank(), ranks.world(), ranks.share(5)), (0, 1, 0..5));
    assert_eq!(ranks.gather_bytes(b"x").unwrap(), vec![b"x".to_vec()]);
    let mut s = [1.5];
    ranks.sum(&mut s).unwrap();
    assert_eq!(s, [1.5]);
}

#[test]
fn a_rank_that_never_joins_is_a_timeout_naming_the_store() {
    // Rank 1 of 2 alone: rank 0 hosts the store and never comes.
    let rdzv = Rendezvous::local(1, 2, free_port(), "test");
    let cfg = DistributedConfig { timeout_s: 2.0, ..Default::default() };
    let start = std::time::Instant::now();
    let e = Ranks::join(&rdzv, &cfg, Device::Cpu).err().expect("no store to meet at").to_string();
    assert!(start.elapsed() < Duration::from_secs(30), "{:?}", start.elapsed());
    assert!(e.contains("rendezvous store"), "{e}");
}

/// Issue 61: the store of an env-var launch listened on every interface. It listens on
/// MASTER_ADDR's only (here loopback's 127.0.0.1, so 127.0.0.2 finds nothing).
#[test]
fn a_hosted_store_listens_on_its_address_only() {
    use vagen_dist::Store;
    let port = free_port();
    let _store = Store::connect("127.0.0.1", port, true, 0, Duration::from_secs(5), None).unwrap();
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let other = std::net::TcpStream::connect(("127.0.0.2", port));
    assert!(other.is_err(), "the store answers on 127.0.0.2 too: it listens on every interface");
}

/// Issue 61: a rank whose MASTER_PORT accepts and never answers hung past `timeout_s`, and
/// printed a C++ stack trace when the listener closed. It gives up in time, in one line.
#[test]
fn a_store_that_accepts_and_never_answers_is_given_up_within_the_timeout() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || listener.incoming().take(8).flatten().collect::<Vec<_>>());
    let started = std::time::Instant::now();
    let err = vagen_dist::Store::connect("127.0.0.1", port, false, 0, Duration::from_secs(2), None)
        .err()
        .expect("nothing answered");
    let took = started.elapsed();
    let text = err.to_string();
    assert!(took < Duration::from_secs(8), "gave up after {took:?}");
    assert!(!text.contains("frame #") && !text.contains("Exception raised from"), "a C++ trace: {text}");
    assert!(text.lines().count() <= 2, "{text}");
    drop(held);
}

/// Issue 61: a stranger who reached the store wrote a rank's error key and stopped the run.
/// With the job's token, the keys the ranks read are out of its reach: the run goes on.
#[test]
fn a_stranger_without_the_job_token_cannot_stop_the_ranks() {
    let port = free_port();
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let rdzv = Rendezvous {
                    job_token: Some("secret-of-this-job".into()),
                    ..Rendezvous::local(rank, 2, port, "test")
                };
                let cfg = DistributedConfig { timeout_s: 30.0, ..Default::default() };
                let ranks = Ranks::join(&rdzv, &cfg, Device::Cpu).unwrap();
                ranks.barrier("joined").unwrap();
                if rank == 0 {
                    let stranger =
                        vagen_dist::Store::connect("127.0.0.1", port, false, 0, Duration::from_secs(5), None).unwrap();
                    for k in 0..2 {
                        stranger.set(&format!("err/{k}"), b"forged by a stranger").unwrap();
                    }
                }
                // Long enough for the watchdogs (a beat each 200 ms) to read any error key.
                std::thread::sleep(Duration::from_secs(2));
                ranks.barrier("after").unwrap();
                ranks.finish();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}
