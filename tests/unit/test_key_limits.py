"""The API's in-process tables of keys and addresses stay bounded by evicting their oldest
entries: a flood of new entries never resets the others."""

from __future__ import annotations

from billing_core.repo.api_clients import ApiClient
from services.api.client_limits import FailedKeysByAddress
from services.api.context import KeyCache


def test_a_new_address_in_a_full_table_evicts_only_the_oldest() -> None:
    failures = FailedKeysByAddress(limit=1, window_seconds=60, max_addresses=3)
    for address in ("198.51.100.1", "198.51.100.2", "198.51.100.3"):
        failures.add(address)
    failures.add("198.51.100.4")
    assert failures.retry_after("198.51.100.1") is None
    for address in ("198.51.100.2", "198.51.100.3", "198.51.100.4"):
        assert failures.retry_after(address) is not None, address


def test_a_forgiven_look_up_is_not_counted() -> None:
    failures = FailedKeysByAddress(limit=2, window_seconds=60)
    failures.add("192.0.2.1")
    failures.add("192.0.2.1")
    assert failures.retry_after("192.0.2.1") is not None
    failures.forgive("192.0.2.1")
    assert failures.retry_after("192.0.2.1") is None


def test_a_full_key_cache_evicts_only_the_oldest_entry() -> None:
    cache = KeyCache(ttl_seconds=60, negative_ttl_seconds=60, max_entries=3)
    client = ApiClient(id=1, name="shop", key_prefix="bk_shop")
    cache.put(b"unknown-1", None)
    cache.put(b"verified", client)
    cache.put(b"unknown-2", None)
    cache.put(b"unknown-3", None)
    assert cache.get(b"unknown-1") == (False, None)
    assert cache.get(b"verified") == (True, client)
    assert cache.get(b"unknown-2") == (True, None)
    assert cache.get(b"unknown-3") == (True, None)
