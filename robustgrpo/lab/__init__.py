"""The lab: what the estimators do, measured (the ``lab`` extra: scipy, pandas, tqdm, pyarrow).

Each module imports the core (:mod:`robustgrpo.advantages` and below) and the lab modules before
it in this list, never one after it (``tests/test_project.py`` checks the imports):

``params``
    the argument rules only the lab, the book and the command line read (seeds, probabilities,
    choices, lists, a config's fields, a setting named as the command line spells it);
``files``, ``machine``
    the rules for files, folders, JSON, tables and text from files; the machine's bounds
    (CPUs, memory, time, a Ray cluster's timeout);
``catalogue``
    the estimator catalogue as the lab reads it: settings split among estimators, the catalogue
    as a table, one unclipped call re-clipped at many c;
``reductions``
    robust location and scale of samples as ``scipy.stats`` computes them (median, MAD, Qn, Sn,
    Huber, biweight, winsorize), for the metrics and the primer;
``contamination`` -> ``scenarios``
    clean reward models and contamination models; the named scenarios of ``data/scenarios``;
``rewardlogs`` -> ``runlogs``
    reward logs of real runs (CSV, JSON Lines, Parquet); a TRL or verl run's own log folders;
``metrics`` -> ``diagnose``
    sensitivity, breakdown, efficiency, agreement per sample and per update, the evidence
    battery; a reward log's diagnosis and the estimator it recommends;
``simulate`` -> ``sweep`` -> ``experiments``
    the policy-gradient drift simulator; declared grids x seeds on the local or the Ray engine,
    into a Parquet record; real GRPO runs with TRL on a tiny model under contaminated judges,
    as sweep cells.
"""

__all__: list[str] = []
