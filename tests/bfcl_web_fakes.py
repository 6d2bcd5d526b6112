"""The web BFCL's web search reaches, made here for tests without the internet: a CA made with
`cryptography` and a certificate it signs for serpapi.com; an HTTPS-intercepting proxy that
answers each CONNECT to serpapi.com with TLS under that certificate and SerpAPI's `/search` JSON
(`organic_results` as SerpAPI lays them out, a result linking to the page server); and a page
server whose page for a query holds the answer to it. Both record what they were asked."""

from __future__ import annotations

import datetime
import json
import socket
import socketserver
import ssl
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

SERPAPI = "serpapi.com"


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(the CA's certificate, serpapi.com's certificate, its key) as PEM files in `folder`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "evalpipe test CA")])
    usage = {k: False for k in ("content_commitment", "key_encipherment", "data_encipherment",
                                "key_agreement", "encipher_only", "decipher_only")}  # fmt: skip
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     **usage), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERPAPI)]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERPAPI)]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = folder / "ca.pem", folder / "serpapi.pem", folder / "serpapi.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return paths


class Web:
    """The proxy and the page server, started; `answers` maps a query to the page's answer."""

    def __init__(self, folder: Path, answers: Mapping[str, str]) -> None:
        self.ca, cert, key = make_certificates(folder)
        self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.tls.load_cert_chain(cert, key)
        self.answers = {_squeezed(q): a for q, a in answers.items()}
        self.searches: list[dict[str, list[str]]] = []  # each /search's query parameters
        self.fetched: list[str] = []  # each page's path and query
        web = self

        class Pages(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                web.fetched.append(self.path)
                asked = parse_qs(urlsplit(self.path).query).get("q", [""])[0]
                answer = web.answers.get(_squeezed(asked), "nobody knows")
                body = (f"<html><head><title>Notes</title><style>p {{}}</style></head><body>"
                        f"<p>The answer is <b>{answer}</b></p></body></html>").encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        class Proxy(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                target = self.rfile.readline().split()[1].decode()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                if target != f"{SERPAPI}:443":
                    self.wfile.write(b"HTTP/1.1 403 Forbidden\r\n\r\n")
                    return
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                with web.tls.wrap_socket(self.connection, server_side=True) as tls:
                    web.serp(tls)

        self.pages = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
        self.proxy = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Proxy)
        self.proxy.daemon_threads = True
        for server in (self.pages, self.proxy):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    @property
    def env(self) -> dict[str, str]:
        """What a user behind this proxy sets: it, and the CA that signs what it serves."""
        return {"HTTPS_PROXY": f"http://127.0.0.1:{self.proxy.server_address[1]}",
                "NO_PROXY": "127.0.0.1,localhost", "REQUESTS_CA_BUNDLE": str(self.ca)}  # fmt: skip

    def serp(self, tls: socket.socket) -> None:
        """One SerpAPI request over `tls`: its query recorded, two organic results answered."""
        reader = tls.makefile("rb")
        path = reader.readline().split()[1].decode()
        while reader.readline() not in (b"\r\n", b"\n", b""):
            pass
        params = parse_qs(urlsplit(path).query)
        self.searches.append(params)
        query = params.get("q", [""])[0]
        page = f"http://127.0.0.1:{self.pages.server_address[1]}/notes?q={quote(query)}"
        results = [
            {"position": 1, "title": "Unrelated", "link": "https://example.invalid/",
             "snippet": "Nothing to see.", "favicon": "https://example.invalid/favicon.ico"},
            {"position": 2, "title": "Notes on it", "link": page,
             "snippet": "Where the answer is.", "favicon": "https://example.invalid/favicon.ico"},
        ]  # fmt: skip
        body = json.dumps({"search_metadata": {"status": "Success"},
                           "search_parameters": {"engine": "duckduckgo", "q": query},
                           "organic_results": results}).encode()  # fmt: skip
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
        tls.sendall(head + body)

    def answer(self, query: str, answer: str) -> None:
        """The page for `query` holds `answer`."""
        self.answers[_squeezed(query)] = answer

    def close(self) -> None:
        for server in (self.pages, self.proxy):
            server.shutdown()
            server.server_close()


def _squeezed(query: str) -> str:
    """`query` without whitespace: BFCL's executor, rewriting each name before "(" into a method
    call, drops the space before a "(" inside a string too ("billionaire (according" reaches
    SerpAPI as "billionaire(according"), as its `eval` of the call does in BFCL's own runs."""
    return "".join(query.split())
