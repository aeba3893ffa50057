"""The one project exception. The CLI turns it into a one-line message and exit code 2."""


class MemcalcError(ValueError):
    """Bad input or an impossible request, with a message fit to show a user as one line.

    >>> str(MemcalcError("--gpu: unknown profile 'x'; choose one of: a, b"))
    "--gpu: unknown profile 'x'; choose one of: a, b"
    """


def one_of(field: str, value: object, allowed: "list[str] | tuple[str, ...]") -> MemcalcError:
    """The standard 'unknown value' error: names the field, the value and the valid options.

    >>> str(one_of("--model", "gtp2", ["gpt2", "llama-2-7b"]))
    "--model: unknown value 'gtp2'; choose one of: gpt2, llama-2-7b"
    """
    return MemcalcError(f"{field}: unknown value {value!r}; choose one of: {', '.join(allowed)}")
