//! `auth.trusted_networks`: the networks whose header-less requests act with a
//! configured role (DESIGN §4, "Trusted access"), parsed, matched against a peer, and
//! checked together for covering every address.

/// One `auth.trusted_networks` entry: an address and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl Network {
    /// `a.b.c.d/n` or `x::y/n` (a bare address is `/32` or `/128`). Errors: why not.
    pub fn parse(s: &str) -> Result<Network, String> {
        let (a, p) = s.split_once('/').unwrap_or((s, ""));
        let addr: std::net::IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or CIDR network"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = if p.is_empty() {
            max
        } else {
            p.trim()
                .parse::<u8>()
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))?
        };
        // An IPv4-mapped IPv6 network is the IPv4 network it maps (peers are
        // compared as IPv4 when mapped, see `contains`).
        if let std::net::IpAddr::V6(v6) = addr {
            if let (Some(v4), true) = (v6.to_ipv4_mapped(), prefix >= 96) {
                return Ok(Network {
                    addr: std::net::IpAddr::V4(v4),
                    prefix: prefix - 96,
                });
            }
        }
        Ok(Network { addr, prefix })
    }

    /// The first and last address of the network, as numbers, and whether it is IPv4.
    fn span(&self) -> (u128, u128, bool) {
        let (bits, width, v4) = match self.addr {
            std::net::IpAddr::V4(a) => (u128::from(u32::from(a)), 32u32, true),
            std::net::IpAddr::V6(a) => (u128::from(a), 128u32, false),
        };
        let host = width - u32::from(self.prefix);
        let mask = if host >= 128 {
            u128::MAX
        } else {
            (1u128 << host) - 1
        };
        let top = if width == 128 {
            u128::MAX
        } else {
            (1u128 << width) - 1
        };
        ((bits & !mask) & top, (bits | mask) & top, v4)
    }

    /// Whether `nets` together hold every IPv4 address or every IPv6 address (as
    /// `0.0.0.0/0` does alone, or `0.0.0.0/1` with `128.0.0.0/1`).
    pub fn cover_everything(nets: &[Network]) -> bool {
        [true, false].into_iter().any(|v4| {
            let top = if v4 { u128::from(u32::MAX) } else { u128::MAX };
            let mut spans: Vec<(u128, u128)> = nets
                .iter()
                .map(Network::span)
                .filter(|s| s.2 == v4)
                .map(|s| (s.0, s.1))
                .collect();
            spans.sort_unstable();
            let mut next = 0u128; // the first address not yet covered
            for (first, last) in spans {
                if first > next {
                    return false;
                }
                if last >= top {
                    return true;
                }
                next = next.max(last + 1);
            }
            false
        })
    }

    /// Whether `ip` is in this network (an IPv4-mapped IPv6 peer counts as IPv4).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let bits = |ip: IpAddr| -> (u128, u32) {
            match ip {
                IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
                IpAddr::V6(a) => (u128::from(a), 128),
            }
        };
        let ((net, w1), (addr, w2)) = (bits(self.addr), bits(ip));
        if w1 != w2 {
            return false;
        }
        let shift = w1 - u32::from(self.prefix);
        shift >= w1 || (net >> shift) == (addr >> shift)
    }
}
