"""``memcalc quiz``: questions from the bank files in ``quiz/`` and questions generated from
the learner's own model, asked one at a time, scored, remembered across sessions, with the
mistake behind each wrong option and the concepts to review.

Modules, each with one job:

- ``bank``: the question schema (pydantic, ``extra="forbid"``) and the loader of ``quiz/*.toml``
- ``facts``: the estimates a generated question reads (computed when first read)
- ``draft``: options that carry their mistake, the margin, the registry of question kinds
- ``kinds``: one function per generated question kind (one GPU, full training);
  ``kinds_finetune`` (LoRA, QLoRA), ``kinds_parallel`` (tensor, pipeline, context
  parallelism, ZeRO) and ``kinds_moe`` (mixtures of experts) ask "what if" about the same model
- ``templates``: the English and Urdu text of the generated questions and their mistakes
  (``template``: one question's words; ``words_finetune``, ``words_parallel``, ``words_moe``:
  the words of the kinds beside them, merged into ``templates``)
- ``generate``: every kind's question for a model, and the sibling for a varied setup
- ``figures``: the scale (unit and digits) that makes a printed sum add up; the 5% margin
- ``select``: filters, seeded selection and option shuffling
- ``session``: the question loop (interactive or scripted), answers in Latin or Urdu letters
- ``siblings``: the question asked after a miss on the same concept
- ``typed``: numbers typed with ``--typed``
- ``result``: what a session produced
- ``progress``: the progress file, Leitner boxes, review and stats
- ``render``: text and JSON output; ``terminal``: wrapping and right-to-left layout
- ``bidi``: right-to-left marks and isolates for Urdu
- ``export``: study sheets as Markdown, HTML and Anki decks
- ``messages`` and ``errors``: the words of the screen and the errors, in English and Urdu
- ``command``: the typer function ``quiz_command``

The quiz never imports torch.
"""
