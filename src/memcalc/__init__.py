"""memcalc: how much GPU memory a training job needs, and what makes it fit.

The estimate path (``memcalc.spec``, ``memcalc.graph``, ``memcalc.strategies``,
``memcalc.estimate``, ``memcalc.report``) never imports torch.
"""

__version__ = "0.1.0"
