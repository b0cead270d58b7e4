"""What the DPO is shown: one prompt per escalated plan item, with its own options.

Prompts name datasets, rules, counts and reasons; never an identifier. A subject found
nowhere gets a question of its own: where it was looked for, how many rows nearly match, and
which earlier request erased them if one did.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from erasure.matching import NearMiss
from erasure.model import (
    LAKEHOUSE_REF_RULE,
    NAMED_DATASET_RULE,
    NOT_FOUND_RULE,
    OUTSIDE_REACH_RULE,
    SHARED_IDENTITY_RULE,
    SHARED_ROW_RULE,
    UNKEYED_SHRED_RULE,
    DatasetRef,
    Plan,
    PlanItem,
    SubjectSearch,
)
from erasure.rulings import OPTION_LABELS, options_for

# Prompt subjects: one per escalated dataset, by name; the found-nowhere question.
PROMPT_PREFIX = "Erasure: decide on "
NOT_FOUND_PROMPT = "Erasure: subject found nowhere"
_NEAR_MISS_TEXT = {
    NearMiss.OTHER_EXTENSION: "the same phone number with another extension (or none)",
    NearMiss.SUBADDRESS: "the same address with another +tag (subaddress)",
    NearMiss.SAME_LOCAL_PART: "same local part at another domain",
    NearMiss.CASE: "differs in letter case only, where the column keeps case",
    NearMiss.TURKISH_I: "differs only in a dotted or dotless i (Turkish spelling)",
    NearMiss.LOOKS_ALIKE: "looks alike: letters from another script, accents, separators or "
    "padding zeros differ",
    NearMiss.ONE_EDIT: "one character different",
    NearMiss.UNREADABLE: "not a readable value of this type, but its text looks alike",
    NearMiss.CONTAINS: "holds it among other text (several values in one field)",
}


class Asked(BaseModel):
    """What one prompt asks about: the request, the escalated artefact and the plan it was
    asked from. The prompt carries it, and its answer is a ruling on this artefact and
    nothing else: never paired with another prompt's artefact by position."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    dataset: DatasetRef
    plan_version: int
    lineage_snapshot: str  # the plan's: a prompt asked from another plan is not answered here


class Prompt(BaseModel):
    """A human-in-the-loop prompt: what Airflow's HITL operator shows the DPO."""

    subject: str
    body: str  # Markdown
    options: list[str]  # the button labels, OPTION_LABELS of options_for(item)


class BoundPrompt(Prompt):
    """A prompt with what it asks about: the run's prompt operator records its answer as the
    ruling on `asked` only."""

    asked: Asked


def bound_prompts(request_ref: str, plan: Plan, items: list[PlanItem]) -> list[BoundPrompt]:
    """One prompt per escalated item of `plan`, the request's acting plan (version 1)."""
    return [
        BoundPrompt(
            **escalation_prompt(item).model_dump(),
            asked=Asked(
                request_ref=request_ref,
                dataset=item.dataset,
                plan_version=1,
                lineage_snapshot=plan.lineage_snapshot,
            ),
        )
        for item in items
    ]


def escalation_prompt(item: PlanItem) -> Prompt:
    """The subject, body and options of the DPO's prompt for one escalated item (no
    identifier: datasets, counts and reasons only)."""
    if item.rule == NOT_FOUND_RULE:
        return _not_found_prompt(item)
    lines = [
        f"**Artefact** `{item.dataset.name}` ({item.kind}, namespace `{item.dataset.namespace}`)",
        f"**Why it escalates** (rule {item.rule}): {item.reason}",
    ]
    if item.upstreams:
        lines.append("**Derived from**: " + ", ".join(f"`{u}`" for u in item.upstreams))
    for key, value in sorted(item.evidence.items()):
        if key not in ("gaps", "held_back"):
            lines.append(f"- {key}: {value}")
    lines.extend(_held_back(item.evidence.get("held_back") or []))
    if item.rule == SHARED_ROW_RULE:
        lines.append(
            "Other people's rows point at this row: retain it under an exemption, or delete "
            "this one row (they lose it too). The table itself is never deleted."
        )
    elif item.rule == OUTSIDE_REACH_RULE:
        lines.append(
            "This system cannot reach it. Have its owner erase the person there (the request "
            "stays pending until their confirmation is recorded with `erasure requests "
            "confirm-deletion`), confirm they are not held there, or retain it under an "
            "exemption."
        )
    elif item.rule == UNKEYED_SHRED_RULE:
        lines.append(
            "No key of this subject exists, so destroying keys cannot make this storage "
            "unreadable for them. Ask its owner whether the subject was ever written here: "
            "confirm it is not held, or retain it under an exemption (it stays readable)."
        )
    elif item.rule == NAMED_DATASET_RULE:
        lines.append(
            "The name of this artefact contains the subject's identifier, so it is shown by a "
            "keyed hash and this system does not act on it. Find it downstream of the artefacts "
            "it derives from, in its namespace (`erasure lineage closure` lists names in full "
            "for an operator), and have its owner erase the person there (the request stays "
            "pending until their confirmation is recorded with `erasure requests "
            "confirm-deletion`); confirm the subject is not held if the name only looks like "
            "the identifier, or retain it under an exemption."
        )
    elif item.rule == LAKEHOUSE_REF_RULE:
        lines.append(
            "A branch or tag of this lakehouse table keeps a snapshot with the subject's rows: "
            "time travel to it returns them, and this system does not drop a ref someone "
            "keeps on purpose (an audit, a model's training set). Have the table's owner drop "
            "or re-point it and erase the person there (the request stays pending until their "
            "confirmation is recorded with `erasure requests confirm-deletion`; verify then "
            "looks for them in every snapshot), or retain the table as it is under an "
            "exemption."
        )
    elif item.rule == SHARED_IDENTITY_RULE:
        lines.append(
            "These rows were reached only through an identifier on the subject's rows that "
            "other people's rows also hold (or through a second value of an identifier that "
            "names one person each); the values are not shown. They were not deleted. If they "
            "are not the subject's, confirm the subject is not held in them: they stay as "
            "they are. To keep them under an Art. 17(3) exemption, retain them."
        )
    else:
        lines.append(
            "Choose what happens to this artefact and justify it; a standing ruling applies "
            "to later requests for this dataset until the date you give (deletions never "
            "stand)."
        )
    return Prompt(
        subject=f"{PROMPT_PREFIX}{item.dataset.name}",
        body="\n\n".join(lines),
        options=[OPTION_LABELS[o] for o in options_for(item)],
    )


def _held_back(held_back: list[dict[str, Any]]) -> list[str]:
    """Rule 2b's counts, one line per identifier type held back (counts, never values)."""
    lines = []
    for held in held_back:
        if held.get("one_per_person"):
            found = held.get("values", 0) + held.get("subject_values", 0)
            lines.append(
                f"- {held.get('identifier_type')}: {found} different values found, "
                "and each names one person"
            )
            continue
        where = ", ".join(f"`{name}`: {n}" for name, n in (held.get("other_rows") or {}).items())
        persons = held.get("other_persons")
        lines.append(
            f"- {held.get('identifier_type')}: {held.get('values')} value(s) also held by "
            f"other people's rows ({where or 'none'})"
            + (f", {persons} other person(s)" if persons is not None else "")
            + f"; rows of others pointing at rows holding it: {held.get('other_referrers', 0)}"
        )
    return lines


def _not_found_prompt(item: PlanItem) -> Prompt:
    search = SubjectSearch.model_validate(item.evidence)
    erased = search.already_erased_by
    lines = [
        f"**The {search.identifier_type} of this request was found in no dataset.** It may "
        "be mistyped or spelt differently from how the systems hold it (the value is not "
        "shown here; it is parked encrypted)."
        if erased is None
        else f"**The {search.identifier_type} of this request was already erased by "
        f"{erased.request_ref}, on {erased.on.isoformat()}.** That request's tombstone of it "
        "is on the suppression list, and it is found in no dataset (the value is not shown "
        "here; it is parked encrypted).",
        "**Searched**: "
        + (
            ", ".join(f"`{s.dataset.name}` ({', '.join(s.columns)})" for s in search.searched)
            or "no dataset holds this identifier type"
        ),
    ]
    if search.near_misses:
        lines.append("**Near misses** (rows that match it only loosely; counted, not shown):")
        lines.extend(
            f"- `{m.dataset.name}.{m.column}`: {m.rows} row(s), "
            + _NEAR_MISS_TEXT.get(m.kind, m.kind)
            for m in search.near_misses
        )
    else:
        lines.append("**Near misses**: none (no row matches it even loosely).")
    lines.append(
        "If the identifier is right, confirm the subject is not held and say how you know: "
        "the completion record will state that the subject was not found. If it was "
        "mistyped, submit the corrected identifier as a new request, then confirm here that "
        "this one is not held, naming the new request's reference in the justification."
    )
    return Prompt(
        subject=NOT_FOUND_PROMPT,
        body="\n\n".join(lines),
        options=[OPTION_LABELS[o] for o in options_for(item)],
    )
