# NorDion2 for the CPU mini reproduction: Dion2's mini recipe (config/mini_dion2.py) with NorMuon's row
# normalisation (their train.py's nordion2: muon_beta2 0.95, the default).
include = ["mini_dion2.py"]
optimizer = "nordion2"
