"""A task that must wait is rescheduled by Airflow, holding no worker slot meanwhile: a step
out of order (NotYet), and a lakehouse table another worker holds past the task's own wait
(LakehouseBusy); any other failure stays a failure."""

from __future__ import annotations

import pytest

from erasure.errors import NotYet
from erasure.lakehouse import LakehouseBusy, LakehouseError

pytestmark = [pytest.mark.integration, pytest.mark.airflow]


@pytest.mark.parametrize(
    "waiting",
    [NotYet("erase_rows crm.orders must be in place first"), LakehouseBusy("iceberg t: held")],
)
def test_a_step_that_must_wait_is_rescheduled(waiting: Exception) -> None:
    from airflow.sdk.exceptions import AirflowRescheduleException

    from erasure_airflow.tasks import in_order

    with pytest.raises(AirflowRescheduleException), in_order():
        raise waiting


def test_any_other_failure_fails_the_task() -> None:
    from erasure_airflow.tasks import in_order

    with pytest.raises(LakehouseError, match="refused"), in_order():
        raise LakehouseError("iceberg t: the commit was refused")
