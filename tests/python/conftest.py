import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.environ.get("FOUNDRY_PYTHON_DIR", os.path.join(ROOT, "build", "python")))
