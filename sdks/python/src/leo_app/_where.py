"""Where the broker is and which token to present: the settings an `App` and an `Approver`
share (a unix socket in the broker's home, or an `http://` / `https://` URL; the operator's
token, a paired device's, a token file or a token)."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from ._http import Client, Endpoint, tls_context
from .errors import ConnectError


def default_home() -> Path:
    """`$LEO_HOME`, else `~/.leo`."""
    home = os.environ.get("LEO_HOME")
    return Path(home) if home else Path.home() / ".leo"


@dataclass(frozen=True)
class Where:
    """A broker and a token; the token file is read at every `client()`."""

    endpoint: Endpoint
    #: The TLS settings of an https:// broker, made once for every reconnect.
    tls: ssl.SSLContext | None
    token: str | None
    token_file: Path

    @staticmethod
    def of(
        home: str | os.PathLike[str] | None,
        socket: str | os.PathLike[str] | None,
        url: str | None,
        ca_file: str | os.PathLike[str] | None,
        token: str | None,
        token_file: str | os.PathLike[str] | None,
        device: str | None,
    ) -> Where:
        """The settings as given to `App(...)` or `Approver(...)`, checked."""
        home_path = Path(home) if home is not None else default_home()
        if url and socket:
            raise ValueError("give a URL or a socket, not both")
        endpoint = (
            Endpoint.from_url(url)
            if url
            else Endpoint(socket=str(socket or home_path / "run" / "leo.sock"))
        )
        if ca_file is not None and not endpoint.tls:
            raise ValueError("a CA file needs an https:// URL")
        if len([x for x in (token, token_file, device) if x is not None]) > 1:
            raise ValueError("give one of a token, a token file or a device")
        if device is not None:
            token_file = home_path / "state" / "devices" / f"{device}.token"
        return Where(
            endpoint=endpoint,
            tls=tls_context(ca_file) if endpoint.tls else None,
            token=token,
            token_file=Path(token_file or home_path / "state" / "operator.token"),
        )

    def read_token(self) -> str:
        if self.token is not None:
            return self.token
        try:
            return self.token_file.read_text().strip()
        except OSError as e:
            # The broker creates it at its first start, which may come after the app's.
            raise ConnectError(f"cannot read the token file {self.token_file}: {e}") from None

    def client(self) -> Client:
        """A client with the token as it is now."""
        return Client(self.endpoint, self.read_token(), self.tls)
