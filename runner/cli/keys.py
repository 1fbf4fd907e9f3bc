"""`runner keys new` and `rotate`: the key ring that encrypts payloads at rest."""

from __future__ import annotations

import click

from runner.cli import output
from runner.cli.options import db_option


@click.group()
def keys() -> None:
    """The key ring that encrypts payloads at rest: RUNNER_KEYS (or the file
    RUNNER_KEY_FILE names) holds `id:key` pairs, oldest first; the newest encrypts, any
    decrypts. Keys are never stored in the database (docs/guides/payloads.md).
    """


@keys.command(name="new")
@click.argument("key_id")
def new(key_id: str) -> None:
    """Print a new key as KEY_ID:KEY, to add last to RUNNER_KEYS (or to its file)."""
    from runner.service.keys import new_key_line

    output.line(new_key_line(key_id))


@keys.command(name="rotate")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Rows read per transaction.",
)
@db_option
def rotate(batch_size: int, url: str | None) -> None:
    """Encrypt again, with the newest key, every payload encrypted with an older one.

    Runs while workers run: a batch of rows per short transaction. Stopped half way, it
    loses nothing (each value is rewritten whole or not at all); run it again to finish.
    Remove an old key from the ring only once a rotation has ended after it.
    """
    from runner.service.database import rotate_keys

    done = rotate_keys(url, batch_size=batch_size)
    output.line(f"encrypted again {output.plural(done.values, 'value')} ({done.read} read)")
