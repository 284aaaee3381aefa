"""The facts the faithfulness config plants, each with its probes.

A verbatim probe shares content words with the fact sentence; a paraphrase probe asks
for the same value and shares none (``tests/test_faithfulness_build.py`` checks both).
``required`` is the regular expression retention searches for: the value itself, which
occurs nowhere else in a session.

The standard suite holds service-configuration values with rare tokens (names, codes,
odd numbers): the card's high-surprisal regime. The low-surprisal suite says the same
kind of thing in common words ("we keep logs for two weeks"), the regime the card
leaves open: a query-agnostic pruner that keeps surprising tokens may drop them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlantedFact:
    concept: str
    fact: str  # the sentence planted in the session
    required: str  # regular expression (searched case-insensitively)
    verbatim: tuple[str, ...]
    paraphrase: tuple[str, ...]


STANDARD = (
    PlantedFact("namespace", "We deploy to the Kubernetes namespace 'kestrel-prod'.", r"kestrel-prod",
                ("Which Kubernetes namespace do we deploy to?", "What namespace does our deploy target?"),
                ("Where in the cluster does the service ship?", "Into which cluster partition do our releases go?")),
    PlantedFact("database", "The primary database is CockroachDB.", r"CockroachDB",
                ("What is the primary database?", "Which database is primary for us?"),
                ("Which engine holds the app's persistent records?", "Where do we durably store user records?")),
    PlantedFact("token signing", "Our JWT tokens are signed with ES384.", r"ES384",
                ("Which algorithm are our JWT tokens signed with?",),
                ("What scheme protects the login credentials we hand out?", "How do we make session credentials tamper-proof?")),
    PlantedFact("cache expiry", "The cache TTL is 740 seconds.", r"\b740 seconds",
                ("What is the cache TTL?", "How many seconds is the cache TTL?"),
                ("How long do stored entries live before they expire?",)),
    PlantedFact("rate limit", "The API rate limit is 240 requests per minute per key.", r"\b240 requests",
                ("What is the API rate limit per key?",),
                ("How many calls can a client make before it gets throttled?",)),
    PlantedFact("job queue", "Background jobs go through a RabbitMQ queue named jobs-v3.", r"jobs-v3",
                ("Which queue do background jobs go through?",),
                ("Where does deferred work wait before a worker picks it up?",)),
    PlantedFact("timeout", "The upstream timeout is 47 seconds.", r"\b47 seconds",
                ("What is the upstream timeout?",),
                ("How long before we give up waiting on a slow dependency?",)),
    PlantedFact("region", "Production runs in the eu-west-3 region.", r"eu-west-3",
                ("Which region does production run in?",),
                ("Where is the live environment hosted geographically?",)),
    PlantedFact("framework", "The service is built on the Litestar framework.", r"Litestar",
                ("Which framework is the service built on?",),
                ("What web library handles our HTTP routing?",)),
    PlantedFact("secrets", "Secrets live in Vault under the path kv/orbit-7.", r"kv/orbit-7",
                ("Under which Vault path do secrets live?",),
                ("Where should I look up passwords and API keys?",)),
    PlantedFact("admin port", "The admin console listens on port 9412.", r"\b9412\b",
                ("Which port does the admin console listen on?",),
                ("What number do I connect to for the management UI?",)),
    PlantedFact("webhook retries", "Failed webhooks are retried 7 times with exponential backoff.", r"\b7 times",
                ("How many times are failed webhooks retried?",),
                ("How often do we attempt an outgoing callback again after an error?",)),
    PlantedFact("backups", "Nightly backups are written to the bucket tarn-backups-eu.", r"tarn-backups-eu",
                ("Which bucket are nightly backups written to?",),
                ("Where do the periodic data snapshots end up?",)),
    PlantedFact("on-call", "Pages for this service go to the on-call rota heron-sre.", r"heron-sre",
                ("Which on-call rota gets pages for this service?",),
                ("Who gets woken up when production breaks?",)),
)

LOW_SURPRISAL = (
    PlantedFact("log retention", "We keep logs for two weeks.", r"two weeks",
                ("How long do we keep logs?",),
                ("For what period is old output held before deletion?",)),
    PlantedFact("deploy day", "Deploys happen every Monday morning.", r"Monday morning",
                ("When do deploys happen?",),
                ("On which day does new code go live?",)),
    PlantedFact("backup schedule", "We back up the database once a day.", r"once a day",
                ("How often do we back up the database?",),
                ("How frequently are copies of the stored records made?",)),
    PlantedFact("hosting", "The service runs on three small machines.", r"three small machines",
                ("What does the service run on?",),
                ("How much hardware hosts the app?",)),
    PlantedFact("idle logout", "Users are logged out after one hour without activity.", r"one hour",
                ("When are users logged out?",),
                ("How long can someone stay idle before the session ends?",)),
    PlantedFact("weekly report", "We send the weekly report by email.", r"by email",
                ("How do we send the weekly report?",),
                ("Through which channel does the seven-day summary go out?",)),
    PlantedFact("branch cleanup", "Old branches are deleted after a month.", r"after a month",
                ("When are old branches deleted?",),
                ("How long before stale lines of development get removed?",)),
    PlantedFact("page speed", "The home page should load in under two seconds.", r"under two seconds",
                ("How fast should the home page load?",),
                ("What is the speed target for the landing screen?",)),
    PlantedFact("free trial", "New accounts get a free trial of ten days.", r"ten days",
                ("How long is the free trial for new accounts?",),
                ("How long can fresh sign-ups use the product without paying?",)),
    PlantedFact("alerts", "Alerts go to the team chat first.", r"team chat",
                ("Where do alerts go first?",),
                ("Where is someone told initially when something breaks?",)),
    PlantedFact("code review", "The main branch needs two approvals before a merge.", r"two approvals",
                ("How many approvals does the main branch need before a merge?",),
                ("How many reviewers must sign off before code lands?",)),
)

SUITE_FACTS = {"standard": STANDARD, "low_surprisal": LOW_SURPRISAL}
