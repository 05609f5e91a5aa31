"""Where outbound HTTP may go (SSRF policy; X-EVENT): every outbound job's request
passes through ``check`` before a connection is made.

- http and https only, no user info in the URL given to a receiver's host check;
- a host written as a number must be a canonical address: decimal (``2130706433``), octal
  (``0177.0.0.1``), hex (``0x7f.1``), shortened (``127.1``) forms are refused outright;
- a host name is resolved ONCE; every address it resolves to must be allowed, and the caller connects
  to the checked address (no second lookup: DNS rebinding cannot swap it), keeping Host and TLS SNI;
- refused address classes: loopback, private (RFC 1918), CGNAT (100.64/10), link-local (169.254/16
  with the cloud metadata address, fe80::/10), unique-local (fc00::/7), IPv4-mapped / 6to4 / Teredo /
  NAT64 IPv6 (they embed IPv4), multicast, unspecified, reserved and documentation ranges: everything
  Python's ``ipaddress`` does not call global;
- ``LEDGERFLOW_OUTBOUND_ALLOW`` (comma separated CIDRs and host names) opens chosen private
  destinations, for on-premise receivers and the tests.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import SplitResult, urlsplit, urlunsplit

from app.settings import OUTBOUND_ALLOW

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
ALLOW_ENV = OUTBOUND_ALLOW.name
DESTINATION_FORBIDDEN = "DESTINATION_FORBIDDEN"
MAX_URL_LENGTH = 2048
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.I)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_CGNAT = ipaddress.ip_network("100.64.0.0/10")

Resolver = Callable[[str, int], list[str]]


class DestinationForbidden(ValueError):
    """The URL may not be contacted under the destination policy (the message says why)."""

    code = DESTINATION_FORBIDDEN


@dataclass(frozen=True)
class Policy:
    allow_networks: tuple[Network, ...] = ()
    allow_hosts: frozenset[str] = frozenset()

    def address_allowed(self, ip: IPAddress) -> bool:
        return any(ip in net for net in self.allow_networks if net.version == ip.version)


@dataclass(frozen=True)
class Destination:
    """A checked destination: connect to ``address`` (never look ``host`` up again)."""

    scheme: str
    host: str  # as written (lower case, no trailing dot); Host header and TLS SNI
    port: int
    address: str
    url: str  # the original URL

    def connect_url(self) -> str:
        """The URL with the checked address in place of the host name."""
        parts = urlsplit(self.url)
        addr = f"[{self.address}]" if ":" in self.address else self.address
        netloc = f"{addr}:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


@lru_cache(maxsize=16)
def parse_policy(raw: str) -> Policy:
    nets: list[Network] = []
    hosts: set[str] = set()
    for item in (p.strip() for p in raw.split(",")):
        if not item:
            continue
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            hosts.add(item.lower().rstrip("."))
    return Policy(tuple(nets), frozenset(hosts))


def current_policy() -> Policy:
    """The configured policy (read on every use, so a changed environment applies at once)."""
    return parse_policy(OUTBOUND_ALLOW.get())


def forbidden_reason(ip: IPAddress) -> str | None:
    """Why an address may not be contacted (None: it is a global unicast address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return "an IPv4-mapped IPv6 address"
        if ip.sixtofour is not None or ip.teredo is not None or ip in _NAT64:
            return "an IPv6 address embedding IPv4"
        if ip.scope_id:
            return "a scoped IPv6 address"
    for attr, why in (
        ("is_unspecified", "the unspecified address"),
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address (cloud metadata lives here)"),
        ("is_multicast", "a multicast address"),
        ("is_private", "a private address"),
        ("is_reserved", "a reserved address"),
    ):
        if getattr(ip, attr):
            return why
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "a shared (CGNAT) address"
    if not ip.is_global:
        return "not a global address"
    return None


def _split(url: str) -> SplitResult:
    if not isinstance(url, str) or len(url) > MAX_URL_LENGTH:
        raise DestinationForbidden(f"the URL must be a string of at most {MAX_URL_LENGTH} characters")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise DestinationForbidden("the URL contains spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise DestinationForbidden(f"the URL is malformed ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise DestinationForbidden("only http and https URLs are allowed")
    if not parts.hostname:
        raise DestinationForbidden("the URL has no host")
    return parts


def _literal(host: str) -> IPAddress | None:
    """The address a numeric host stands for; refuses every non-canonical numeric spelling."""
    if "%" in host:
        raise DestinationForbidden("a scoped IPv6 address is not allowed")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    labels = host.split(".")
    if all(_NUMERIC_LABEL.match(label) for label in labels if label) or host.replace(".", "").isdigit():
        raise DestinationForbidden(f"the host {host!r} is a non-canonical numeric address")
    return None


def _system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def check(url: str, *, policy: Policy | None = None, resolver: Resolver | None = None) -> Destination:
    """Validate ``url`` and resolve its host once; raise ``DestinationForbidden`` or return the checked
    destination to connect to."""
    policy = policy or current_policy()
    parts = _split(url)
    host = parts.hostname.lower().rstrip(".")  # type: ignore[union-attr]  # _split refuses no host
    port = parts.port or (443 if parts.scheme == "https" else 80)
    literal = _literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            addresses = [
                ipaddress.ip_address(a.split("%")[0]) for a in (resolver or _system_resolver)(host, port)
            ]
        except (OSError, UnicodeError) as exc:
            raise DestinationForbidden(f"the host {host!r} does not resolve ({type(exc).__name__})") from None
        if not addresses:
            raise DestinationForbidden(f"the host {host!r} does not resolve")
    host_allowed = host in policy.allow_hosts
    for ip in addresses:
        why = forbidden_reason(ip)
        if why and not (host_allowed or policy.address_allowed(ip)):
            raise DestinationForbidden(f"the host {host!r} resolves to {why}; refused")
    return Destination(parts.scheme, host, port, str(addresses[0]), url)


def check_static(url: str, *, policy: Policy | None = None) -> None:
    """The checks that need no DNS lookup (publish time, when a name may not resolve from where the
    definition is published): the URL's shape, literal addresses in every numeric spelling, and
    ``localhost``. A host name is resolved and checked again by ``check`` at delivery."""
    policy = policy or current_policy()
    parts = _split(url)
    host = parts.hostname.lower().rstrip(".")  # type: ignore[union-attr]  # _split refuses no host
    if host in policy.allow_hosts:
        return
    literal = _literal(host)
    if literal is not None:
        why = forbidden_reason(literal)
        if why and not policy.address_allowed(literal):
            raise DestinationForbidden(f"the host {host!r} is {why}; refused")
    elif host == "localhost" or host.endswith(".localhost"):
        raise DestinationForbidden(f"the host {host!r} is this machine; refused")
