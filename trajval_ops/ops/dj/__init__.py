"""Everything trajval_ops relies on in Data-Juicer beyond its operator API, one module per job,
each through Data-Juicer's own extension points and active only for runs whose recipe uses a
trajval operator; the releases it was written against are checked once (:mod:`.version`).

- :mod:`.version`: the supported Data-Juicer releases, checked when the plugin loads;
- :mod:`.plugin`: the plugin's installation (operators' names, load strategies registered once
  Data-Juicer's load-strategy module exists);
- :mod:`.loading`: load strategies that read a pool without rewriting a value;
- :mod:`.preflight`: Data-Juicer's preflight for a trajval run, as one readable error;
- :mod:`.config_merge`: the repair of Data-Juicer's merge of one operator's recipe entries;
- :mod:`.export`: the run's exporter and Ray's writers writing exactly and atomically;
- :mod:`.ray_dataset`: the whole-pool hooks of the mappers under Ray;
- :mod:`.tables`: a dataset as one Arrow table and back;
- :mod:`.table_mapper`: the base class of the mappers, one Arrow path for both executors;
- :mod:`.parameters`: strict parameter checks, safe base arguments;
- :mod:`.executor`: whether a run uses trajval operators, Ray mode, Ray's actors;
- :mod:`.error_exit`: a user error as one block and exit 2.
"""
