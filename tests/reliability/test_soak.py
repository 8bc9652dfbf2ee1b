"""The random kill soak, short: processes learning on one store and across stores, killed, resumed."""

from __future__ import annotations

import pytest

from tests.reliability import soak
from tests.reliability.__main__ import main
from tests.reliability.tally import Tally, table


@pytest.mark.slow
def test_processes_killed_at_random_instants_and_resumed_lose_double_and_make_up_nothing() -> None:
    tally = soak.run_soak(seconds=8, stores=2, per_store=2, seed=5)
    assert tally.cases >= 5  # kills that landed while a process was running
    assert tally.acknowledged > 0
    assert tally.clean, "\n".join([str(tally.row()), *tally.notes])


def test_the_report_is_one_table_with_every_figure() -> None:
    good = Tally("a", cases=3, acknowledged=7, refused=2)
    bad = Tally("b", cases=1, lost=1)
    assert table([good, bad]).splitlines() == [
        "| scenario | cases | acknowledged | lost | doubled | fabricated | resurrected | erased bytes left "
        "| unexpected errors | refused before recovery |",
        "|----------|------:|-------------:|-----:|--------:|-----------:|------------:|------------------:"
        "|------------------:|------------------------:|",
        "| a        |     3 |            7 |    0 |       0 |          0 |           0 |                 0 "
        "|                 0 |                       2 |",
        "| b        |     1 |            0 |    1 |       0 |          0 |           0 |                 0 "
        "|                 0 |                       0 |",
    ]
    assert good.clean and not bad.clean  # a read refused closed is not a failure
    assert not Tally("c", resurrected=1).clean and not Tally("d", unerased=1).clean


def test_the_command_refuses_unknown_arguments() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--nonsense"])
    assert exit_info.value.code == 2
