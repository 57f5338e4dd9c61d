"""A local stand-in for NASA's Earthdata archive, on 127.0.0.1, serving granules from a folder.

``python tests/archive_server.py --granules DIR [--expire-s N] [--page-size N]
[--latency-s S]`` starts:

- a CMR-like search service (``/search/granules.umm_json``): the query parameters zagg's
  search sends as the CMR search API takes them (``short_name``, ``version``,
  ``temporal``, ``bounding_box``, ``polygon``/``polygon[]`` with ``options[polygon][or]``,
  ``readable_granule_name[]`` with ``options[readable_granule_name][pattern]``,
  ``page_size``), any other parameter refused as CMR refuses it (HTTP 400, ``errors``), a
  clockwise polygon refused too, and paging by the ``CMR-Search-After`` header. Its answers
  are UMM-G records (``hits``, ``items`` of ``meta`` and ``umm``) written from CMR's
  documentation and built from each granule's own metadata: its time span
  (``delta_time``), a bounding polygon (the convex hull of its photons, widened by
  0.01°), its RGT and cycle (``/orbit_info``) as ``Track``, its size, and its S3 and
  HTTPS links. ``--page-size`` caps a page below CMR's 2,000 so that paging is exercised;
- an Earthdata Login stand-in (``/api/users/find_or_create_token``: a token for the
  username and password it prints); tokens are JWTs signed by this server, with ``exp``;
- the DAAC's data host: ``/s3credentials`` issues S3 keys that expire after
  ``--expire-s`` seconds to a valid bearer token, and ``/BUCKET/KEY`` serves a granule in
  Range requests to a valid bearer token (HTTP 401 otherwise);
- the DAAC's S3: moto's server holds the granules in the bucket, fronted by a small
  S3-compatible proxy that honours only keys this server issued, before they expire
  (SigV4 signatures checked with botocore's own signer; ``ExpiredToken``,
  ``InvalidAccessKeyId``, ``SignatureDoesNotMatch`` and ``AccessDenied`` as S3 answers
  them) and only reads (GET, HEAD). moto accepts any keys, hence the proxy.

It prints one JSON line, ``{"env": {...}, "short_name": ..., "version": ..., ...}``: under
the variables in ``env`` (addresses and a valid token only) an unchanged zagg run whose
granules are a ``search:`` block uses these services instead of NASA's; the line also
carries an expired token and the login's username and password for the tests. It serves
until killed.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import fnmatch
import hashlib
import hmac
import http.client
import json
import secrets
import string
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import h5py
import numpy as np

BUCKET = "nsidc-cumulus-prod-protected"
PROVIDER = "NSIDC_CPRD"
USERNAME = "zagg-tester"
EPOCH = dt.datetime(2018, 1, 1, tzinfo=dt.UTC)
MARGIN = 0.01  # degrees a granule's hull is widened by
MAX_PAGE = 2000  # CMR's own largest page
COORDINATES = {  # where each product keeps its points' coordinates
    "ATL03": ("heights/lat_ph", "heights/lon_ph", "heights/delta_time"),
    "ATL06": ("land_ice_segments/latitude", "land_ice_segments/longitude", None),
}
CMR_PARAMETERS = {
    "short_name",
    "version",
    "temporal",
    "bounding_box",
    "polygon",
    "polygon[]",
    "options[polygon][or]",
    "readable_granule_name[]",
    "options[readable_granule_name][pattern]",
    "page_size",
}


# --------------------------------------------------------------------------- granules


@dataclass(frozen=True)
class Granule:
    """What the archive knows of one granule file."""

    name: str
    path: Path
    size: int
    short_name: str
    version: str
    start: dt.datetime
    end: dt.datetime
    polygon: list[tuple[float, float]]  # counter-clockwise, closed
    rgt: int
    cycle: int

    @property
    def key(self) -> str:
        return f"ATLAS/{self.short_name}/{self.version}/{self.start:%Y/%m/%d}/{self.name}"


def _fill_as_nan(dset) -> np.ndarray:
    values = dset[:].astype(np.float64)
    fill = dset.attrs.get("_FillValue")
    if fill is not None:
        values[values == np.asarray(fill).ravel()[0]] = np.nan
    return values


def describe_granule(path: Path) -> Granule:
    """A granule's metadata from its own contents."""
    from scipy.spatial import ConvexHull

    with h5py.File(path, "r") as f:
        short = f.attrs["short_name"]
        short = short.decode() if isinstance(short, bytes) else str(short)
        lat_p, lon_p, time_p = COORDINATES[short]
        lats, lons, times = [], [], []
        for beam in f:
            if not beam.startswith("gt") or f"{beam}/{lat_p}" not in f:
                continue
            lats.append(_fill_as_nan(f[f"{beam}/{lat_p}"]))
            lons.append(_fill_as_nan(f[f"{beam}/{lon_p}"]))
            t = f"{beam}/{time_p or lat_p.rsplit('/', 1)[0] + '/delta_time'}"
            times.append(_fill_as_nan(f[t]))
        rgt = int(f["orbit_info/rgt"][0])
        cycle = int(f["orbit_info/cycle_number"][0])
    lat, lon, t = (np.concatenate(a) for a in (lats, lons, times))
    ok = np.isfinite(lat) & np.isfinite(lon)
    points = np.column_stack([lon[ok], lat[ok]])
    hull = points[ConvexHull(points).vertices]  # counter-clockwise
    centre = hull.mean(axis=0)
    away = hull - centre
    hull = hull + MARGIN * away / np.linalg.norm(away, axis=1, keepdims=True)
    ring = [(float(x), float(y)) for x, y in hull] + [(float(hull[0, 0]), float(hull[0, 1]))]
    t = t[np.isfinite(t)]
    version = path.name.split("_")[3]
    return Granule(
        path.name,
        path,
        path.stat().st_size,
        short,
        version,
        EPOCH + dt.timedelta(seconds=float(t.min())),
        EPOCH + dt.timedelta(seconds=float(t.max())),
        ring,
        rgt,
        cycle,
    )


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def umm_g(g: Granule, data_url: str) -> dict:
    """The ``granules.umm_json`` item of a granule (UMM-G 1.6 fields NSIDC fills)."""
    return {
        "meta": {
            "concept-type": "granule",
            "concept-id": f"G{abs(hash(g.name)) % 10**10:010d}-{PROVIDER}",
            "revision-id": 1,
            "native-id": g.name,
            "provider-id": PROVIDER,
            "format": "application/vnd.nasa.cmr.umm+json",
        },
        "umm": {
            "GranuleUR": g.name,
            "CollectionReference": {"ShortName": g.short_name, "Version": g.version},
            "TemporalExtent": {
                "RangeDateTime": {"BeginningDateTime": _iso(g.start), "EndingDateTime": _iso(g.end)}
            },
            "SpatialExtent": {
                "HorizontalSpatialDomain": {
                    "Geometry": {
                        "GPolygons": [
                            {
                                "Boundary": {
                                    "Points": [
                                        {"Longitude": x, "Latitude": y} for x, y in g.polygon
                                    ]
                                }
                            }
                        ]
                    },
                    "Track": {
                        "Cycle": g.cycle,
                        "Passes": [{"Pass": g.rgt, "Tiles": ["1L", "1R", "2L", "2R", "3L", "3R"]}],
                    },
                }
            },
            "DataGranule": {
                "ArchiveAndDistributionInformation": [
                    {
                        "Name": g.name,
                        "SizeInBytes": g.size,
                        "Size": round(g.size / 1e6, 2),
                        "SizeUnit": "MB",
                    }
                ],
                "DayNightFlag": "Unspecified",
                "ProductionDateTime": _iso(g.end),
            },
            "RelatedUrls": [
                {
                    "URL": f"{data_url}/{BUCKET}/{g.key}",
                    "Type": "GET DATA",
                    "Description": "Download the granule over HTTPS",
                },
                {
                    "URL": f"s3://{BUCKET}/{g.key}",
                    "Type": "GET DATA VIA DIRECT ACCESS",
                    "Description": "This link provides direct download access via S3",
                },
                {
                    "URL": f"{data_url}/{BUCKET}/{g.key}.xml",
                    "Type": "EXTENDED METADATA",
                },
            ],
            "MetadataSpecification": {
                "URL": "https://cdn.earthdata.nasa.gov/umm/granule/v1.6.6",
                "Name": "UMM-G",
                "Version": "1.6.6",
            },
        },
    }


# --------------------------------------------------------------------------- geometry


def _signed_area(ring) -> float:
    x, y = np.asarray(ring, dtype=np.float64).T
    return 0.5 * float(np.sum(x[:-1] * y[1:] - x[1:] * y[:-1]))


def _inside(point, ring) -> bool:
    x, y = point
    hit = False
    for (x0, y0), (x1, y1) in zip(ring, ring[1:], strict=False):
        if (y0 > y) != (y1 > y) and x < x0 + (y - y0) * (x1 - x0) / (y1 - y0):
            hit = not hit
    return hit


def _cross(a, b, c, d) -> bool:
    def side(p, q, r):
        return np.sign((q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0]))

    return side(a, b, c) != side(a, b, d) and side(c, d, a) != side(c, d, b)


def intersects(ring_a, ring_b) -> bool:
    """Whether two closed lon/lat rings overlap (planar: enough for small regions)."""
    if _inside(ring_a[0], ring_b) or _inside(ring_b[0], ring_a):
        return True
    return any(
        _cross(a0, a1, b0, b1)
        for a0, a1 in zip(ring_a, ring_a[1:], strict=False)
        for b0, b1 in zip(ring_b, ring_b[1:], strict=False)
    )


def _pairs(text: str) -> list[tuple[float, float]]:
    v = [float(x) for x in text.split(",")]
    return list(zip(v[0::2], v[1::2], strict=True))


# --------------------------------------------------------------------------- tokens


class Tokens:
    """Earthdata-Login-like bearer tokens: JWTs signed with this server's secret."""

    def __init__(self):
        self.secret = secrets.token_bytes(32)

    def make(self, exp: float) -> str:
        def b64(doc):
            return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

        head = b64({"typ": "JWT", "alg": "HS256"})
        body = b64({"type": "User", "uid": USERNAME, "exp": int(exp), "iat": int(time.time())})
        sig = hmac.new(self.secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
        return f"{head}.{body}.{base64.urlsafe_b64encode(sig).rstrip(b'=').decode()}"

    def check(self, header: str | None) -> str | None:
        """None for a valid ``Bearer`` token, else why it is refused."""
        if not header or not header.startswith("Bearer "):
            return "missing bearer token"
        token = header[len("Bearer ") :]
        parts = token.split(".")
        if len(parts) != 3:
            return "invalid token"
        want = hmac.new(self.secret, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
        got = base64.urlsafe_b64decode(parts[2] + "=" * (-len(parts[2]) % 4))
        if not hmac.compare_digest(want, got):
            return "invalid token"
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        if claims["exp"] <= time.time():
            return "token expired"
        return None


@dataclass(frozen=True)
class Keys:
    secret: str
    token: str
    expires: float


class Archive:
    """The state the services share: the granules, tokens and issued S3 keys."""

    def __init__(self, granules: list[Granule], expire_s: float, page_size: int):
        self.granules = sorted(granules, key=lambda g: g.name)
        self.by_key = {f"/{BUCKET}/{g.key}": g for g in self.granules}
        self.expire_s = expire_s
        self.page_size = page_size
        self.tokens = Tokens()
        self.password = secrets.token_urlsafe(12)
        self.keys: dict[str, Keys] = {}
        self.lock = threading.Lock()
        self.data_url = ""

    def issue(self) -> dict:
        akid = "ASIA" + "".join(secrets.choice(string.ascii_uppercase) for _ in range(16))
        expires = time.time() + self.expire_s
        keys = Keys(secrets.token_urlsafe(30), secrets.token_urlsafe(60), expires)
        with self.lock:
            self.keys[akid] = keys
        when = dt.datetime.fromtimestamp(expires, dt.UTC)
        return {
            "accessKeyId": akid,
            "secretAccessKey": keys.secret,
            "sessionToken": keys.token,
            "expiration": when.strftime("%Y-%m-%d %H:%M:%S%z").replace("+0000", "+00:00"),
        }


# --------------------------------------------------------------------------- services


class Handler(BaseHTTPRequestHandler):
    archive: Archive
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def reply(self, status: int, body: bytes, kind="application/json", headers=None):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def json(self, status: int, doc, headers=None):
        self.reply(status, json.dumps(doc).encode(), headers=headers)


class CMR(Handler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/search/granules.umm_json":
            return self.json(404, {"errors": [f"{url.path} is not a search route"]})
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        unknown = sorted(set(query) - CMR_PARAMETERS)
        if unknown:
            return self.json(400, {"errors": [f"Parameter [{unknown[0]}] was not recognized."]})
        try:
            found = self.search(query)
        except ValueError as exc:
            return self.json(400, {"errors": [str(exc)]})
        size = int(query.get("page_size", ["10"])[0])
        if not 0 <= size <= MAX_PAGE:
            return self.json(400, {"errors": ["page_size must be a number between 0 and 2000"]})
        size = min(size, self.archive.page_size)
        after = self.headers.get("CMR-Search-After")
        if after:
            last = json.loads(after)[0]
            found_after = [g for g in found if g.name > last]
        else:
            found_after = found
        page = found_after[:size]
        headers = {"CMR-Hits": str(len(found)), "CMR-Took": "1"}
        if page:
            headers["CMR-Search-After"] = json.dumps([page[-1].name])
        items = [umm_g(g, self.archive.data_url) for g in page]
        self.json(200, {"hits": len(found), "took": 1, "items": items}, headers)

    def search(self, q) -> list[Granule]:
        out = list(self.archive.granules)
        if "short_name" in q:
            out = [g for g in out if g.short_name in q["short_name"]]
        if "version" in q:
            out = [g for g in out if g.version in q["version"]]
        if "temporal" in q:
            start, end = (
                dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
                for t in q["temporal"][0].split(",")
            )
            out = [g for g in out if g.start <= end and start <= g.end]
        rings = []
        if "bounding_box" in q:
            w, s, e, n = (float(v) for v in q["bounding_box"][0].split(","))
            rings.append([(w, s), (e, s), (e, n), (w, n), (w, s)])
        for text in q.get("polygon", []) + q.get("polygon[]", []):
            ring = _pairs(text)
            if ring[0] != ring[-1]:
                raise ValueError(
                    "The polygon boundary is not closed: its first and last points differ"
                )
            if _signed_area(ring) < 0:
                raise ValueError(
                    "The polygon boundary points are listed in the wrong order (clockwise vs "
                    "counter clockwise), or the polygon is invalid"
                )
            rings.append(ring)
        if rings:
            out = [g for g in out if any(intersects(g.polygon, r) for r in rings)]
        names = q.get("readable_granule_name[]", [])
        if names:
            pattern = q.get("options[readable_granule_name][pattern]", ["false"])[0] == "true"
            out = [
                g
                for g in out
                if any(fnmatch.fnmatchcase(g.name, n) if pattern else g.name == n for n in names)
            ]
        return out


class EDL(Handler):
    def do_POST(self):
        if self.path != "/api/users/find_or_create_token":
            return self.json(404, {"error": "not found"})
        auth = self.headers.get("Authorization", "")
        want = base64.b64encode(f"{USERNAME}:{self.archive.password}".encode()).decode()
        if auth != f"Basic {want}":
            return self.json(401, {"error": "invalid_credentials"})
        token = self.archive.tokens.make(time.time() + 86400)
        self.json(200, {"access_token": token, "token_type": "Bearer"})


class Data(Handler):
    """The DAAC's HTTPS host: S3 keys, and granules in Range requests, to a valid token."""

    def do_GET(self):
        if self.path == "/_issued":  # the tests' view: how many key sets were issued
            with self.archive.lock:
                return self.json(200, {"issued": len(self.archive.keys)})
        why = self.archive.tokens.check(self.headers.get("Authorization"))
        if why is not None:
            return self.json(401, {"error": why})
        if self.path == "/s3credentials":
            return self.json(200, self.archive.issue())
        g = self.archive.by_key.get(urllib.parse.unquote(urllib.parse.urlsplit(self.path).path))
        if g is None:
            return self.json(404, {"error": "not found"})
        data = g.path.read_bytes()
        etag = {"ETag": f'"{hashlib.md5(data).hexdigest()}"', "Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        if rng is None:
            return self.reply(200, data, "application/octet-stream", etag)
        lo, hi = rng.removeprefix("bytes=").split("-")
        lo, hi = int(lo), min(int(hi) if hi else len(data) - 1, len(data) - 1)
        if lo >= len(data):
            return self.reply(416, b"", headers={"Content-Range": f"bytes */{len(data)}"})
        headers = {**etag, "Content-Range": f"bytes {lo}-{hi}/{len(data)}"}
        self.reply(206, data[lo : hi + 1], "application/octet-stream", headers)

    do_HEAD = do_GET


class S3Proxy(Handler):
    """S3 in front of moto: only keys this archive issued, unexpired, correctly signed."""

    moto: str  # host:port
    latency: float = 0.0  # seconds each request waits, as across a continent

    def refuse(self, status: int, code: str, message: str):
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
        ).encode()
        self.reply(status, body, "application/xml")

    def do_GET(self):
        time.sleep(self.latency)
        why = self.verify()
        if why is not None:
            return self.refuse(*why)
        conn = http.client.HTTPConnection(self.moto, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        conn.request(self.command, self.path, headers=headers)
        r = conn.getresponse()
        body = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        head = self.command == "HEAD"
        self.send_header(
            "Content-Length", r.getheader("Content-Length", "0") if head else str(len(body))
        )
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        conn.close()

    do_HEAD = do_GET

    def do_PUT(self):
        self.refuse(403, "AccessDenied", "Access Denied")

    do_POST = do_DELETE = do_PUT

    def verify(self):
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        auth = self.headers.get("Authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            return 403, "AccessDenied", "Access Denied"
        fields = dict(
            part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 ") :].split(",")
        )
        akid, _, region, service, _ = fields["Credential"].split("/")
        with self.archive.lock:
            keys = self.archive.keys.get(akid)
        if keys is None:
            return 403, "InvalidAccessKeyId", "The AWS Access Key Id does not exist in our records."
        if keys.expires <= time.time():
            return 400, "ExpiredToken", "The provided token has expired."
        if self.headers.get("x-amz-security-token") != keys.token:
            return 403, "InvalidToken", "The provided token is malformed or otherwise invalid."
        signed = fields["SignedHeaders"].split(";")
        request = AWSRequest(
            method=self.command,
            url=f"http://{self.headers['Host']}{self.path}",
            headers={h: self.headers[h] for h in signed if self.headers.get(h) is not None},
        )
        request.context["timestamp"] = self.headers["x-amz-date"]
        signer = S3SigV4Auth(Credentials(akid, keys.secret, keys.token), service, region)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if not hmac.compare_digest(expected, fields["Signature"]):
            return (
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided.",
            )
        return None


def serve(handler: type[Handler], archive: Archive, **attrs) -> str:
    cls = type(handler.__name__, (handler,), {"archive": archive, **attrs})
    server = ThreadingHTTPServer(("127.0.0.1", 0), cls)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"


def start_s3(archive: Archive) -> str:
    """moto's S3 holding the granules; returns its host:port."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://{host}:{port}",
        aws_access_key_id="moto",
        aws_secret_access_key="moto",
        region_name="us-west-2",
    )
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    for g in archive.granules:
        s3.upload_file(str(g.path), BUCKET, g.key)
    return f"{host}:{port}"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--granules", required=True, help="folder of granule files (.h5)")
    p.add_argument("--expire-s", type=float, default=3600.0, help="life of issued S3 keys")
    p.add_argument("--page-size", type=int, default=MAX_PAGE, help="records per page at most")
    p.add_argument("--latency-s", type=float, default=0.0, help="delay of each S3 request")
    args = p.parse_args(argv)
    paths = sorted(Path(args.granules).glob("*.h5"))
    granules = [describe_granule(path) for path in paths]
    if not granules:
        sys.exit(f"no granule files (.h5) in {args.granules}")
    archive = Archive(granules, args.expire_s, args.page_size)
    moto = start_s3(archive)
    cmr = serve(CMR, archive)
    edl = serve(EDL, archive)
    archive.data_url = serve(Data, archive)
    s3 = serve(S3Proxy, archive, moto=moto, latency=args.latency_s)
    line = {
        "env": {
            "ZAGG_CMR_URL": f"{cmr}/search",
            "ZAGG_EDL_URL": edl,
            "ZAGG_S3_ENDPOINT_URL": s3,
            "EARTHDATA_TOKEN": archive.tokens.make(time.time() + 86400),
        },
        "short_name": granules[0].short_name,
        "version": granules[0].version,
        "granules": [g.name for g in archive.granules],
        "expired_token": archive.tokens.make(time.time() - 60),
        "username": USERNAME,
        "password": archive.password,
        "data_url": archive.data_url,
    }
    print(json.dumps(line), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
