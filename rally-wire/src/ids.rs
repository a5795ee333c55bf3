//! Node identities and lanes.

use std::fmt;
use std::str::FromStr;

/// Where a node listens: `rally://system@host:port`.
///
/// # Example
///
/// ```
/// use rally::remote::NodeAddress;
///
/// let address: NodeAddress = "rally://bench@127.0.0.1:2552".parse().unwrap();
/// assert_eq!(address.port, 2552);
/// assert_eq!(address.to_string(), "rally://bench@127.0.0.1:2552");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeAddress {
    /// The actor system's name.
    pub system: String,
    /// Host name or IP.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rally://{}@{}:{}", self.system, self.host, self.port)
    }
}

/// Why a node address did not parse.
///
/// # Example
///
/// ```
/// use rally::remote::{AddressParseError, NodeAddress};
///
/// let missing_port = "rally://b@10.0.0.2".parse::<NodeAddress>();
/// assert_eq!(missing_port, Err(AddressParseError::Port));
/// assert_eq!(
///     "b@10.0.0.2:2552".parse::<NodeAddress>().unwrap_err().to_string(),
///     "a node address starts with rally://"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressParseError {
    /// It does not start with `rally://`.
    #[error("a node address starts with rally://")]
    Scheme,
    /// No `system@` part.
    #[error("a node address names its system: rally://system@host:port")]
    System,
    /// No `:port`, or the port is not a number from 0 to 65535.
    #[error("a node address ends with :port (0-65535)")]
    Port,
    /// The host is empty.
    #[error("a node address has a host")]
    Host,
}

impl FromStr for NodeAddress {
    type Err = AddressParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s
            .strip_prefix("rally://")
            .ok_or(AddressParseError::Scheme)?;
        let (system, hostport) = rest.split_once('@').ok_or(AddressParseError::System)?;
        if system.is_empty() {
            return Err(AddressParseError::System);
        }
        let (host, port) = hostport.rsplit_once(':').ok_or(AddressParseError::Port)?;
        if host.is_empty() {
            return Err(AddressParseError::Host);
        }
        let port = port.parse().map_err(|_| AddressParseError::Port)?;
        Ok(Self {
            system: system.to_owned(),
            host: host.to_owned(),
            port,
        })
    }
}

/// A node's incarnation: random per start, so a restarted node is told apart from its
/// previous life at the same address.
///
/// # Example
///
/// ```
/// use rally::remote::Incarnation;
///
/// assert_eq!(Incarnation(0x2a).to_string(), "000000000000002a");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Incarnation(pub u64);

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A node address plus its incarnation.
///
/// # Example
///
/// ```
/// use rally::remote::{Incarnation, NodeAddress, UniqueAddress};
///
/// let address: NodeAddress = "rally://b@10.0.0.2:2552".parse().unwrap();
/// let before = UniqueAddress { address: address.clone(), incarnation: Incarnation(1) };
/// let restarted = UniqueAddress { address, incarnation: Incarnation(2) };
/// assert_ne!(before, restarted, "same address, another life of the node");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UniqueAddress {
    /// Where it listens.
    pub address: NodeAddress,
    /// Which life of that node.
    pub incarnation: Incarnation,
}

/// A connection's purpose: control (handshake, heartbeats, system messages), ordinary
/// messages (several lanes, chosen by recipient), or large messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Heartbeats and system messages; never behind user traffic.
    Control,
    /// Ordinary messages, lane `n`.
    Ordinary(u8),
    /// Large messages, so they never delay the others.
    Large,
}

/// Ordinary lanes a node may have: bytes 1..=254 on the wire.
pub const MAX_ORDINARY_LANES: u8 = 254;

impl Lane {
    /// The byte on the wire: 0 control, 1..=254 ordinary, 255 large. Every lane has its own
    /// byte.
    ///
    /// # Panics
    ///
    /// For `Ordinary(n)` with `n >= MAX_ORDINARY_LANES` (254), which has no byte; a node
    /// refuses to start with more ordinary lanes than that, so it never makes one.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Control => 0,
            Self::Ordinary(n) => {
                assert!(
                    n < MAX_ORDINARY_LANES,
                    "ordinary lane {n} has no wire byte (at most {MAX_ORDINARY_LANES} lanes)"
                );
                n + 1
            }
            Self::Large => 255,
        }
    }

    /// Reads the byte on the wire.
    ///
    /// # Example
    ///
    /// ```
    /// use rally_wire::Lane;
    /// assert_eq!(Lane::from_u8(Lane::Ordinary(3).to_u8()), Some(Lane::Ordinary(3)));
    /// ```
    pub fn from_u8(byte: u8) -> Option<Self> {
        Some(match byte {
            0 => Self::Control,
            255 => Self::Large,
            n => Self::Ordinary(n - 1),
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn every_lane_byte_round_trips(byte: u8) {
            let lane = Lane::from_u8(byte).unwrap();
            prop_assert_eq!(lane.to_u8(), byte);
        }

        #[test]
        fn ordinary_lanes_have_distinct_bytes(a in 0..MAX_ORDINARY_LANES, b in 0..MAX_ORDINARY_LANES) {
            let (x, y) = (Lane::Ordinary(a).to_u8(), Lane::Ordinary(b).to_u8());
            prop_assert_eq!(x == y, a == b);
            prop_assert!(x != Lane::Control.to_u8() && x != Lane::Large.to_u8());
            prop_assert_eq!(Lane::from_u8(x), Some(Lane::Ordinary(a)));
        }

        #[test]
        fn addresses_round_trip_through_text(
            system in "[a-z][a-z0-9-]{0,15}",
            host in "[a-z0-9.]{1,20}",
            port: u16,
        ) {
            let address = NodeAddress { system, host, port };
            prop_assert_eq!(address.to_string().parse::<NodeAddress>(), Ok(address));
        }
    }

    #[test]
    fn bad_addresses_say_why() {
        assert_eq!(
            "http://a@b:1".parse::<NodeAddress>(),
            Err(AddressParseError::Scheme)
        );
        assert_eq!(
            "rally://b:1".parse::<NodeAddress>(),
            Err(AddressParseError::System)
        );
        assert_eq!(
            "rally://a@b".parse::<NodeAddress>(),
            Err(AddressParseError::Port)
        );
        assert_eq!(
            "rally://a@b:99999".parse::<NodeAddress>(),
            Err(AddressParseError::Port)
        );
        assert_eq!(
            "rally://a@:1".parse::<NodeAddress>(),
            Err(AddressParseError::Host)
        );
    }
}
