# sdk-project.sh, sourced by a page's hidden set-up before the commands that
# install the SDKs: it makes a project directory beside a fresh clone of this
# tree (../idem, as the pages say), with a Go module that uses the SDK and a
# Python virtual environment of its own, and goes into it. check_sdks NAME
# then runs one job through each of the TypeScript and Python packages, as
# installed, against the page's idemd; `deactivate && cd "$sdk_back"` ends it.
sdk_back=$PWD
sdk=$(mktemp -d)
"$DOCTEST_REPO/internal/testsupport/doctest/testdata/fresh-clone.sh" "$sdk/idem"
mkdir "$sdk/project"
cd "$sdk/project"
go mod init example.com/project 2>/dev/null
cat > main.go <<'GO'
package main

import (
	"fmt"

	"github.com/idemhq/idem/client"
)

func main() { fmt.Println(client.ErrLeaseLost) }
GO
python3 -m venv "$sdk/venv"
. "$sdk/venv/bin/activate"
# No network: the Python package needs none.
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
cat > check.mjs <<'JS'
import { IdemClient, connectTransport } from "@idemhq/idem";
const idem = new IdemClient(connectTransport({ baseUrl: process.argv[2] }));
const res = await idem.do({ namespace: "sdk_check", key: process.argv[3] }, () => JSON.stringify({ sdk: "typescript" }));
console.log(res.json().sdk);
JS
cat > check.py <<'PY'
import sys
import idem
print(idem.Client(sys.argv[1]).do(idem.Job("sdk_check", sys.argv[2]), lambda attempt: {"sdk": "python"}).json()["sdk"])
PY
check_sdks() {
	local url="http://$IDEM_JSON_LISTEN"
	test "$(node check.mjs "$url" "ts-$1-$(date +%s%N)")" = typescript
	test "$(python check.py "$url" "py-$1-$(date +%s%N)")" = python
}
