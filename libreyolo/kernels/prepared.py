"""What an implementation's ``accepts`` hands to its call: the input validated and planned once."""


class Prepared:
    """Base class of the plan an ``accepts`` returns to take an input (instead of ``None``).

    ``dispatch`` passes it to the implementation as the keyword argument ``prepared``, so the
    call skips the validation and planning ``accepts`` already did; a direct call without it
    prepares for itself.
    """

    __slots__ = ()
