"""The queue service's target rules without a server: the allow-list, the service URL in
base64, the batch key of a target, and what a delivery sends."""

from __future__ import annotations

import base64
import re

import pytest

from dbscheduler.http_delivery import AllowList, TargetRefused, decode_service, http_target


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(("entries", "url", "allowed"), [
    (["mail.internal"], "http://mail.internal/x", True),
    (["mail.internal"], "https://MAIL.internal:8443/x", True),
    (["mail.internal"], "http://mail.internal.evil.com/x", False),
    (["mail.internal"], "http://evil.com/?mail.internal", False),
    (["mail.internal"], "http://mail.internal@evil.com/x", False),
    (["mail.internal:8080"], "http://mail.internal:8080/x", True),
    (["mail.internal:8080"], "http://mail.internal/x", False),
    (["mail.internal:443"], "https://mail.internal/x", True),
    (["*.example.com"], "http://hooks.example.com/x", True),
    (["*.example.com"], "http://a.b.example.com/x", True),
    (["*.example.com"], "http://example.com/x", False),
    (["*.example.com"], "http://badexample.com/x", False),
    (["127.0.0.1"], "http://127.0.0.1:9000/x", True),
    (["127.0.0.1"], "http://127.0.0.2/x", False),
    (["[::1]"], "http://[::1]:8000/x", True),
    ([], "http://127.0.0.1/x", False),
])
def test_the_allow_list(entries: list[str], url: str, allowed: bool) -> None:
    assert AllowList(entries).allows(url) is allowed


@pytest.mark.parametrize("entry", ["", " ", "http://x.com", "x.com/path", "user@x.com",
                                   "x.*.com", "x.com:port", "a b"])
def test_a_bad_allow_list_entry_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="allowed host"):
        AllowList([entry])


def test_a_single_string_is_one_host_not_its_letters() -> None:
    assert AllowList("mail.internal").hosts == ("mail.internal",)


@pytest.mark.parametrize(("service", "message"), [
    ("%%%", "base64"),
    (b64("ftp://h/x"), "http(s) URL"),
    (b64("mailto:a@b"), "http(s) URL"),
    (b64("http:///x"), "no host"),
    (b64("http://h:99999/x"), "port"),
    (b64("http://h/a b"), "spaces"),
    (base64.urlsafe_b64encode(b"\xff\xfe").decode(), "base64"),
    ("", "base64"),
])
def test_a_bad_service_is_refused_with_the_reason(service: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        decode_service(service)


def test_the_service_is_url_safe_base64_with_or_without_padding() -> None:
    url = "http://127.0.0.1:8000/digest?to=a+b&x=~~"
    padded = b64(url)
    assert "=" in padded
    assert decode_service(padded) == decode_service(padded.rstrip("=")) == url


def test_one_merge_key_per_target_and_dash_keys_stay_dash_keys() -> None:
    allow = AllowList(["h"])
    a = http_target("k", "post", b64("http://h/a"), allow)
    assert (a.method, a.url) == ("POST", "http://h/a")
    assert a.key == http_target("k", "POST", b64("http://h/a"), allow).key
    assert a.key != http_target("k", "PUT", b64("http://h/a"), allow).key
    assert a.key != http_target("k", "POST", b64("http://h/b"), allow).key
    assert http_target("-k", "POST", b64("http://h/a"), allow).key.startswith("-k ")
    with pytest.raises(TargetRefused, match="allow-list"):
        http_target("k", "POST", b64("http://other/a"), allow)
    with pytest.raises(ValueError, match="method"):
        http_target("k", "GET", b64("http://h/a"), allow)
    assert http_target("k", "POST", b64("http://other/a"), None).url == "http://other/a"
