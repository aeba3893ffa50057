"""``memcalc quiz``: questions from the bank files in ``quiz/`` and questions generated from
the learner's own model, asked one at a time, scored, with the concepts to review.

Modules, each with one job:

- ``bank``: the question schema (pydantic, ``extra="forbid"``) and the loader of ``quiz/*.toml``
- ``generate``: questions whose numbers come from ``estimate`` for the learner's model
- ``templates``: the English and Urdu text of the generated questions
- ``select``: filters, seeded selection and option shuffling
- ``session``: the question loop (interactive or scripted) and scoring
- ``render``: text and JSON output
- ``messages``: the words of the quiz screen in English and Urdu
- ``command``: the typer function ``quiz_command``

The quiz never imports torch.
"""
