"""Running agent loops outside training: ``session.run`` (the run's lifecycle, locally or over Ray
actors), the ``Runner`` it drives, run configs, datasets, pre-flight checks, progress and replay."""
