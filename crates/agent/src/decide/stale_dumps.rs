//! Which binlog dump threads serve a replica that is no longer there: those whose TCP
//! connection has retransmitted unanswered several times. MariaDB lets a returning replica's
//! registration wait for its old dump thread, which notices the flag set for it only after its
//! next send gets through, and that wait holds up the primary's other sessions, commits
//! included, for as long as the sender's retransmission back-off (measured: 11–14 s after a
//! heal). Ending such a thread during the cut leaves nothing to wait for. A replica whose
//! kernel still acknowledges (however slow its application) never retransmits, so it is never
//! chosen; a replica whose agent is down still acknowledges, which is why renewals cannot
//! stand in for this test.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Retransmissions of one segment, unanswered, that mark a connection as cut: with Linux's
/// 200 ms least retransmission timeout and its doubling, the fourth comes 3 s after the send.
pub const CUT_RETRANSMITS: u32 = 4;

/// `/proc/net/tcp`'s state of an established connection.
const ESTABLISHED: &str = "01";
/// `/proc/net/tcp`'s timer kind of the retransmission timer.
const RETRANSMIT_TIMER: &str = "01";

/// A connection to the server's port whose sends go unanswered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unanswered {
    /// The client's address, as the server sees it.
    pub peer: SocketAddr,
    /// Retransmissions so far of the oldest unacknowledged segment.
    pub retransmits: u32,
}

/// A dump thread, from the process list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpThread {
    pub id: u64,
    /// `HOST`: `ip:port` for a TCP client under `skip_name_resolve`.
    pub host: String,
}

/// The connections of one `/proc/net/tcp` or `/proc/net/tcp6` table that are established on
/// `port` locally and have retransmitted at least [`CUT_RETRANSMITS`] times. Lines that do not
/// parse are skipped: the kernel's format is fixed, and a stray line must not stop the rest.
pub fn unanswered(table: &str, port: u16) -> Vec<Unanswered> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local remote st tx:rx tr:when retrnsmt ...
            let (local, remote, state, timer, retransmits) =
                (f.get(1)?, f.get(2)?, f.get(3)?, f.get(5)?, f.get(6)?);
            let local = parse_address(local)?;
            let peer = parse_address(remote)?;
            let retransmits = u32::from_str_radix(retransmits, 16).ok()?;
            let (timer, _) = timer.split_once(':')?;
            (local.port() == port
                && *state == ESTABLISHED
                && timer == RETRANSMIT_TIMER
                && retransmits >= CUT_RETRANSMITS)
                .then_some(Unanswered { peer, retransmits })
        })
        .collect()
}

/// The dump threads to end: those whose client is an unanswered connection's peer.
pub fn to_end(threads: &[DumpThread], cut: &[Unanswered]) -> Vec<(u64, Unanswered)> {
    threads
        .iter()
        .filter_map(|t| {
            let host = parse_host(&t.host)?;
            let c = cut.iter().find(|c| unmapped(c.peer) == host)?;
            Some((t.id, c.clone()))
        })
        .collect()
}

/// Whether a dump thread's `HOST` names its client by address, as `skip_name_resolve` (the
/// operator's default) makes it: by a host name, it cannot be matched to a connection.
pub fn names_an_address(thread: &DumpThread) -> bool {
    parse_host(&thread.host).is_some()
}

/// `HOST` as an address: `10.0.0.7:51234`, or an IPv6 address followed by `:port`.
fn parse_host(host: &str) -> Option<SocketAddr> {
    let (ip, port) = host.rsplit_once(':')?;
    let ip: IpAddr = ip
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()?;
    Some(unmapped(SocketAddr::new(ip, port.parse().ok()?)))
}

/// An IPv4 client of a dual-stack listener appears as `::ffff:a.b.c.d` in one view and as
/// `a.b.c.d` in the other.
fn unmapped(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

/// `/proc/net/tcp`'s `ADDR:PORT`: the address as the kernel's 32-bit words printed in the
/// host's byte order, the port as a number, both in hex.
fn parse_address(field: &str) -> Option<SocketAddr> {
    let (addr, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok()?;
        Some(w.to_ne_bytes())
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut octets = [0u8; 16];
            for i in 0..4 {
                octets[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some(unmapped(SocketAddr::new(ip, port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";

    fn peer(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Lines as the primary's pod showed them during a cut from both replicas (10.244.1.3
    /// serving; 10.244.0.4 and 10.244.2.3 cut off), with neighbours that must not count.
    #[test]
    fn only_established_connections_to_the_port_retransmitting_enough_count() {
        let table = format!(
            "{HEADER}\
   0: 00000000:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 1 1 0 100 0 0 10 0\n\
  38: 0301F40A:0CEA 0401F40A:DFF2 01 00000000:00000000 02:000AFC74 00000000   999        0 20109280 3 0 20 4 28 12 -1\n\
  52: 0301F40A:0CEA 0401F40A:D688 08 00000000:00000001 02:000AFA6C 00000000   999        0 20107071 2 0 20 4 26 12 -1\n\
  95: 0301F40A:0CEA 0400F40A:9418 01 00000422:00000000 01:00000062 00000004   999        0 20103120 3 0 332 4 30 1 -1\n\
 111: 0301F40A:0CEA 0302F40A:D3D8 01 00000228:00000000 01:00000082 00000006   999        0 20102607 3 0 326 4 30 1 -1\n\
 112: 0301F40A:0CEA 0302F40A:D3E0 01 00000228:00000000 01:00000082 00000003   999        0 20102608 3 0 326 4 30 1 -1\n\
 113: 0301F40A:0CEA 0302F40A:D3E2 01 00000228:00000000 04:00000082 00000009   999        0 20102609 3 0 326 4 30 1 -1\n\
 114: 0301F40A:9CFC 0302F40A:0CEA 01 00000001:00000000 01:0000001F 00000007   999        0 20106157 2 0 100 0 0 1 -1\n\
 115: 0301F40A:0CEA 0302F40A:D3E4 06 00000000:00000000 03:00001342 00000000     0        0 0 3 0\n\
 garbage\n"
        );
        type Case<'a> = (&'a str, u16, &'a [(&'a str, u32)]);
        let cases: &[Case] = &[
            (
                "the two cut replicas, not the listener, the healthy client, the one with 3 \
                 retransmissions, the zero-window probe, the outgoing connection or TIME_WAIT",
                3306,
                &[("10.244.0.4:37912", 4), ("10.244.2.3:54232", 6)],
            ),
            ("another port: none", 3307, &[]),
        ];
        for (name, port, want) in cases {
            let want: Vec<Unanswered> = want
                .iter()
                .map(|(p, r)| Unanswered {
                    peer: peer(p),
                    retransmits: *r,
                })
                .collect();
            assert_eq!(unanswered(&table, *port), want, "{name}");
        }
    }

    #[test]
    fn ipv6_tables_give_ipv4_clients_unmapped_and_ipv6_ones_whole() {
        let table = format!(
            "{HEADER}\
   1: 0000000000000000FFFF00000301F40A:0CEA 0000000000000000FFFF00000401F40A:9418 01 00000422:00000000 01:00000062 00000005   999 0 1 3 0\n\
   2: 00000000000000000000000001000000:0CEA 00000000000000000000000001000000:A000 01 00000422:00000000 01:00000062 00000004   999 0 1 3 0\n"
        );
        assert_eq!(
            unanswered(&table, 3306),
            vec![
                Unanswered {
                    peer: peer("10.244.1.4:37912"),
                    retransmits: 5
                },
                Unanswered {
                    peer: peer("[::1]:40960"),
                    retransmits: 4
                },
            ]
        );
    }

    #[test]
    fn threads_are_matched_to_cut_connections_by_their_client_address() {
        let cut = vec![
            Unanswered {
                peer: peer("10.244.0.4:37912"),
                retransmits: 4,
            },
            Unanswered {
                peer: peer("[::1]:40960"),
                retransmits: 5,
            },
        ];
        let thread = |id, host: &str| DumpThread {
            id,
            host: host.into(),
        };
        let cases: &[(&str, Vec<DumpThread>, Vec<u64>)] = &[
            (
                "the cut replica's thread",
                vec![thread(7, "10.244.0.4:37912"), thread(8, "10.244.2.3:54232")],
                vec![7],
            ),
            (
                "the same address on another port is another connection",
                vec![thread(9, "10.244.0.4:37913")],
                vec![],
            ),
            (
                "a mapped address in the process list",
                vec![thread(10, "::ffff:10.244.0.4:37912")],
                vec![10],
            ),
            ("an IPv6 client", vec![thread(11, "::1:40960")], vec![11]),
            (
                "a socket client or a name is nobody's",
                vec![thread(12, "localhost"), thread(13, "replica.example:37912")],
                vec![],
            ),
            ("no threads", vec![], vec![]),
        ];
        for (name, threads, want) in cases {
            let got: Vec<u64> = to_end(threads, &cut)
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            assert_eq!(&got, want, "{name}");
        }
        assert!(
            to_end(&[thread(7, "10.244.0.4:37912")], &[]).is_empty(),
            "nothing cut"
        );
        assert!(names_an_address(&thread(1, "10.244.0.4:37912")));
        assert!(!names_an_address(&thread(
            1,
            "atoll-1.atoll-headless:37912"
        )));
    }
}
