"""A deterministic, realistic month of user posts.

Demos, tests and benchmarks need input that looks like the real thing (several languages, emoji,
URLs, a few very long reports) yet is identical on every run, so results can be compared. The
posts are about "Hearthly", a fictional smart thermostat with an app, a subscription and a filter
delivery service. Everything comes from `random.Random(seed)`: same arguments, same bytes.
"""

from __future__ import annotations

import calendar
import json
import random
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["generate_posts", "write_posts"]

MAX_LONG_CHARS = 6000
LONG_SHARE = 0.05

_MONTH_RE = re.compile(r"(\d{4})-(\d{2})")
_MONTH_NAMES = (
    "",
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------

_LANG_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("en", 75),
    ("zh", 5),
    ("es", 5),
    ("de", 4),
    ("fr", 4),
    ("ja", 4),
    ("pt", 3),
)

_SOURCE_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("forum", 35),
    ("social", 30),
    ("app-review", 20),
    ("support-ticket", 15),
)

_CATEGORY_WEIGHTS: dict[str, tuple[tuple[str, int], ...]] = {
    "forum": (
        ("question", 30),
        ("complaint", 20),
        ("praise", 10),
        ("suggestion", 15),
        ("announcement", 10),
        ("offtopic", 15),
    ),
    "social": (
        ("question", 15),
        ("complaint", 25),
        ("praise", 25),
        ("suggestion", 10),
        ("announcement", 10),
        ("offtopic", 15),
    ),
    "app-review": (("complaint", 40), ("praise", 40), ("suggestion", 20)),
    "support-ticket": (("question", 45), ("complaint", 55)),
}

# What a second paragraph may be, given the first one's category.
_FOLLOW_UPS: dict[str, tuple[str, ...]] = {
    "question": ("complaint", "question"),
    "complaint": ("question", "suggestion"),
    "praise": ("suggestion", "praise"),
    "suggestion": ("suggestion", "praise"),
    "announcement": ("question",),
    "offtopic": (),
}

# --------------------------------------------------------------------------------------------
# Short posts: templates and slot fillers per language
# --------------------------------------------------------------------------------------------

_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "en": {
        "question": (
            "Is there a way to have different schedules per room? I have a {device} in the "
            "{room} and another one upstairs, and they keep fighting each other.",
            "How do I move my {device} to a new Wi-Fi network without losing all my schedules? "
            "We're changing routers this weekend.",
            "Does {feature} work if two people in the house have the app? My partner left for "
            "work and the heating stayed on for {hours} hours.",
            "Quick one: what does the orange ring on the {device} mean? It showed up this morning "
            "and the manual only mentions blue and white.",
            "Can I pause the filter box delivery for a month without cancelling Hearthly Plus? "
            "We're away most of next month.",
            "Is app {version} safe to install? I remember the last update broke {feature} for a "
            "lot of people.",
            "Anyone running the {device} with a heat pump? Wondering whether the eco preset is "
            "smart enough to avoid the backup heater.",
            "Where do I find the invoice for my Hearthly Plus renewal? I need it for an expense "
            "report and the account page only shows the amount.",
            "Does the {device} keep running its schedule if the internet goes down? We get "
            "outages in {city} a lot in winter.",
            "Has anyone figured out how to show Celsius and Fahrenheit at the same time? My "
            "parents visit and they only think in one of them 😄",
            "Can {feature} be set up from the tablet app, or only from a phone? The option is "
            "greyed out on my iPad.",
        ),
        "complaint": (
            "My {device} {problem}, and it's been like that {duration}. I've restarted it, "
            "re-paired it and reinstalled the app on my {phone}. Nothing helps.",
            "Order {order}: the filter box was supposed to arrive last week. Tracking has said "
            "'label created' for {wait} days now.",
            "Since app {version} {feature} is basically unusable. It takes ages to load and half "
            "the time it shows yesterday's data.",
            "I was charged twice for Hearthly Plus this month (two lines of ${price}). Support "
            "chat closed my conversation without answering.",
            "The {device} in our {room} {problem}. It's {temp}°C in here and the display says "
            "everything is fine.",
            "Really disappointed. Paid for the annual plan and {feature} has been broken "
            "{duration}. Not what I expected for a premium product.",
            "Third replacement filter in a row arrived with a crushed box. Please use better "
            "packaging, it's not hard.",
            "The app logs me out every single day on my {phone}. Having to type a 2FA code just "
            "to turn the heating up is ridiculous.",
            "Why does the {device} click so loudly at night? The old thermostat was silent. Our "
            "kid wakes up every time it switches.",
            "Support told me to 'wait for the next firmware'. That was {wait} days ago. My "
            "{device} still {problem}.",
        ),
        "praise": (
            "Honestly impressed. {praise}, and the {device} just disappears into the background. "
            "Exactly what I wanted.",
            "After {days} days with the {device} I can say it: {praise}. Would buy again.",
            "Shout-out to support. Had a problem with {feature} and they sorted it within "
            "{hours} hours, on a {weekday}.",
            "{praise}. Didn't expect that from a thermostat, but here we are 🎉",
            "The new {feature} in {version} is great. Finally I can see which room is eating my "
            "heating budget.",
            "Switched from a basic programmable thermostat last winter. Our bill is down about "
            "{percent}% compared with the same month last year.",
            "Love that the filter box just shows up. One less thing to remember, and Hearthly "
            "Plus pays for itself just for that.",
            "Geofencing works perfectly for us now. Warm when we get home, off when we leave. "
            "Took some tuning but worth it.",
        ),
        "suggestion": (
            "Feature request: {wish}. I'd happily pay a bit more for Hearthly Plus if it "
            "included that.",
            "It would be great to have {wish}. Right now I have to do it by hand every {weekday}.",
            "Suggestion for the {device}: let us dim the display at night. It lights up the "
            "whole {room}.",
            "Please add {wish}. Half the people in this forum seem to be asking for it.",
            "Could the energy report compare with the same month last year instead of last "
            "month? Month-to-month is useless in autumn.",
            "Idea: let the filter box delivery adjust to how much the system actually runs. We "
            "barely heat in summer but still get filters every month.",
            "Small UX thing: the button for {feature} sits right next to 'turn off'. I've hit "
            "the wrong one more than once.",
            "Would love {wish} in the next release. Even a beta toggle would be fine.",
        ),
        "announcement": (
            "Heads-up: firmware {firmware} is rolling out in waves. Release notes mention fixes "
            "for {feature} and Wi-Fi reconnects. Details: {url}",
            "App {version} is live in the stores. Changelog says {feature} got a redesign. "
            "Anyone tried it yet?",
            "The status page shows a cloud outage right now ({url}). Your {device} keeps running "
            "local schedules, only the app can't reach it.",
            "Meetup: a few of us in {city} are getting together on {weekday} to swap tips on "
            "heat pump settings. Everyone welcome.",
            "Hearthly just announced that filter box delivery is coming to {city} next month. "
            "Finally!",
            "PSA: if your {device} {problem}, there's a workaround in the pinned thread: {url}",
            "Price change notice: Hearthly Plus goes up to ${price} per month for new "
            "subscribers. Existing plans stay the same until renewal.",
        ),
        "offtopic": (
            "Off-topic, but what's everyone doing about draughty windows? We've got old sash "
            "windows and the {device} is working overtime.",
            "Anyone else in {city} getting that weird early frost this week? {emoji}",
            "Not about Hearthly: can anyone recommend a decent mesh Wi-Fi system? The signal in "
            "our {room} is terrible.",
            "What's a comfortable temperature for a home office? I'm at {temp}°C and still "
            "wearing a hoodie.",
            "Random thought: this forum is more helpful than most of the internet. Thanks, "
            "everyone.",
            "Totally off-topic: does anyone have a good slow-cooker chili recipe? The cold "
            "weather is here.",
            "Is it just me or is the forum really slow today? Takes ages to open a thread.",
        ),
    },
    "zh": {
        "question": (
            "请问{device}怎么设置{feature}？说明书里完全没写，App 里也找了半天。",
            "有没有人知道 Hearthly Plus 能不能暂停一个月？下个月要出差，不想直接退订。",
        ),
        "complaint": (
            "更新到 {version} 以后，{device}{problem}，已经{duration}了。"
            "重启、重新配对都试过，没用。",
            "订单 {order} 的滤网到现在还没到，物流信息{wait}天没更新了，客服也不回消息。",
        ),
        "praise": (
            "用了{days}天，{praise}，整体非常满意 👍",
            "{feature}真的好用，回家之前暖气已经开好了，冬天的幸福感提升了很多。",
        ),
        "suggestion": (
            "希望能加入{wish}，现在每次都要手动改，太麻烦了。",
            "建议晚上把{device}的屏幕调暗一点，放在卧室里实在太亮了。",
        ),
        "announcement": (
            "刚看到官方通知：{firmware} 固件开始分批推送，据说修复了掉线的问题。详情见 {url}",
            "App {version} 已经可以更新了，{feature}的界面改了不少，大家可以试试。",
        ),
        "offtopic": (
            "有点跑题：大家冬天室内一般设多少度？我家现在是{temp}度，感觉还是有点冷。",
            "题外话，有没有人推荐靠谱的 Mesh 路由器？卧室那边信号太差了。",
        ),
    },
    "ja": {
        "question": (
            "{device}で{feature}を設定する方法を教えてください。アプリの中を探しても見つかりません。",
            "Hearthly Plusを一か月だけ停止することはできますか？来月は出張でほとんど家にいません。",
        ),
        "complaint": (
            "アプリを{version}に更新してから、{device}が{problem}。{duration}この状態で、"
            "再起動しても直りません。",
            "注文番号{order}のフィルターがまだ届きません。配送状況が{wait}日間更新されていません。",
        ),
        "praise": (
            "使い始めて{days}日ですが、{praise}。買ってよかったです😊",
            "{feature}が本当に便利です。帰宅前に部屋が暖まっているので、冬の朝が楽になりました。",
        ),
        "suggestion": (
            "{wish}があると嬉しいです。今は毎回手動で変更しています。",
            "夜は{device}の画面をもう少し暗くできるようにしてほしいです。寝室だとまぶしすぎます。",
        ),
        "announcement": (
            "公式から案内がありました。ファームウェア{firmware}の配信が順次始まっているそうです。"
            "詳しくはこちら：{url}",
            "アプリ{version}が公開されました。{feature}の画面がかなり変わっています。",
        ),
        "offtopic": (
            "少し話がそれますが、皆さんは冬の室温を何度にしていますか？うちは{temp}度です。",
            "関係ない質問ですみません。おすすめのメッシュWi-Fiルーターはありますか？"
            "寝室の電波が弱くて困っています。",
        ),
    },
    "es": {
        "question": (
            "¿Alguien sabe cómo configurar {feature} en el {device}? No encuentro la opción por "
            "ningún lado.",
            "¿Se puede pausar la suscripción Hearthly Plus un mes sin cancelarla? El mes que "
            "viene estaremos fuera.",
        ),
        "complaint": (
            "Desde la actualización {version}, el {device} {problem}. Llevo así {duration} y "
            "nadie del soporte me contesta.",
            "El pedido {order} con los filtros tenía que llegar la semana pasada y el seguimiento "
            "no se mueve desde hace {wait} días.",
        ),
        "praise": (
            "Llevo {days} días con el {device} y {praise}. Muy contento, la verdad 👍",
            "Lo mejor es {feature}: cuando llego a casa la calefacción ya está puesta. Un "
            "acierto total.",
        ),
        "suggestion": (
            "Estaría genial tener {wish}. Ahora mismo tengo que hacerlo todo a mano.",
            "Sugerencia: que se pueda bajar el brillo de la pantalla del {device} por la noche. "
            "En el dormitorio molesta bastante.",
        ),
        "announcement": (
            "Aviso: ya está saliendo el firmware {firmware}. Dicen que arregla las "
            "desconexiones. Más info: {url}",
            "Ya está disponible la app {version}. Han cambiado bastante {feature}, a ver qué tal.",
        ),
        "offtopic": (
            "Pregunta fuera de tema: ¿a cuántos grados tenéis la calefacción en casa? Nosotros "
            "la tenemos a {temp} °C.",
            "Nada que ver con Hearthly, pero ¿alguien me recomienda un router mesh? En el "
            "dormitorio casi no llega el wifi.",
        ),
    },
    "de": {
        "question": (
            "Weiß jemand, wie man {feature} am {device} einrichtet? Ich finde die Einstellung "
            "einfach nicht.",
            "Kann man Hearthly Plus für einen Monat pausieren, ohne zu kündigen? Wir sind "
            "nächsten Monat fast nur unterwegs.",
        ),
        "complaint": (
            "Seit dem Update auf {version} gibt es Ärger: Mein {device} {problem}. Das geht "
            "jetzt schon {duration} so.",
            "Bestellung {order}: Die Filterbox sollte letzte Woche kommen, die "
            "Sendungsverfolgung steht seit {wait} Tagen still.",
        ),
        "praise": (
            "Nach {days} Tagen kann ich sagen: {praise}. Klare Empfehlung!",
            "Am meisten mag ich {feature}: Wenn wir nach Hause kommen, ist es schon warm.",
        ),
        "suggestion": (
            "Wäre super, wenn es {wish} gäbe. Momentan stelle ich alles von Hand um.",
            "Vorschlag: Bitte eine Option, um das Display nachts zu dimmen. Im Schlafzimmer ist "
            "das echt zu hell.",
        ),
        "announcement": (
            "Info: Die Firmware {firmware} wird gerade nach und nach verteilt. Soll die "
            "Verbindungsabbrüche beheben. Details: {url}",
            "In der App {version} wurde die Oberfläche für {feature} komplett überarbeitet.",
        ),
        "offtopic": (
            "Mal was ganz anderes: Auf wie viel Grad heizt ihr eigentlich im Winter? Bei uns "
            "sind es {temp} °C.",
            "Etwas off-topic: Kann jemand ein gutes Mesh-System empfehlen? Im Schlafzimmer ist "
            "das WLAN miserabel.",
        ),
    },
    "fr": {
        "question": (
            "Quelqu'un sait comment configurer {feature} sur le {device} ? Je ne trouve l'option "
            "nulle part.",
            "Est-ce qu'on peut suspendre Hearthly Plus pendant un mois sans résilier ? On sera "
            "absents presque tout le mois prochain.",
        ),
        "complaint": (
            "Depuis la mise à jour {version}, mon {device} {problem}. Ça dure depuis {duration} "
            "et le support ne répond pas.",
            "Commande {order} : la box de filtres devait arriver la semaine dernière, et le "
            "suivi n'a pas bougé depuis {wait} jours.",
        ),
        "praise": (
            "Après {days} jours d'utilisation, {praise}. Je recommande 👍",
            "Ce que je préfère, c'est {feature} : quand on rentre, la maison est déjà chaude.",
        ),
        "suggestion": (
            "Ce serait top d'avoir {wish}. Pour l'instant je fais tout à la main.",
            "Suggestion : pouvoir baisser la luminosité de l'écran la nuit. Dans une chambre, "
            "c'est vraiment trop lumineux.",
        ),
        "announcement": (
            "Info : le firmware {firmware} est en cours de déploiement. Il paraît qu'il corrige "
            "les déconnexions. Détails : {url}",
            "La version {version} de l'appli est sortie. L'écran pour {feature} a été "
            "complètement revu.",
        ),
        "offtopic": (
            "Petite question hors sujet : vous chauffez à combien chez vous en hiver ? Chez nous "
            "c'est {temp} °C.",
            "Rien à voir avec Hearthly, mais quelqu'un aurait un routeur mesh à conseiller ? Le "
            "wifi ne passe pas dans la chambre.",
        ),
    },
    "pt": {
        "question": (
            "Alguém sabe como configurar {feature} no {device}? Não acho a opção em lugar nenhum.",
            "Dá para pausar o Hearthly Plus por um mês sem cancelar? No mês que vem vamos viajar.",
        ),
        "complaint": (
            "Depois da atualização {version}, o meu {device} {problem}. Já faz {duration} e o "
            "suporte não responde.",
            "Pedido {order}: os filtros deviam ter chegado semana passada e o rastreio não muda "
            "há {wait} dias.",
        ),
        "praise": (
            "Uso há {days} dias e {praise}. Recomendo demais 😄",
            "O que eu mais gosto é {feature}: quando chego em casa já está tudo na temperatura "
            "certa.",
        ),
        "suggestion": (
            "Seria ótimo ter {wish}. Hoje faço tudo na mão.",
            "Sugestão: deixar diminuir o brilho da tela à noite. No quarto incomoda bastante.",
        ),
        "announcement": (
            "Aviso: o firmware {firmware} começou a ser liberado aos poucos. Dizem que resolve "
            "as quedas de conexão. Mais info: {url}",
            "Saiu a versão {version} do app. Mudaram bastante {feature}, vale a pena conferir.",
        ),
        "offtopic": (
            "Pergunta fora do tema: vocês deixam o ar-condicionado em quantos graus no verão? "
            "Aqui em casa fica em {temp} °C.",
            "Nada a ver com a Hearthly, mas alguém indica um roteador mesh? O wi-fi não chega no "
            "quarto.",
        ),
    },
}

_POOLS: dict[str, dict[str, tuple[str, ...]]] = {
    "en": {
        "device": ("Dial", "Dial Mini", "Dial (2nd gen)", "thermostat"),
        "feature": (
            "away mode",
            "the schedule editor",
            "geofencing",
            "the energy report",
            "the eco preset",
            "the home screen widget",
            "the vacation hold",
            "multi-room zones",
            "the filter reminder",
            "the weekly summary email",
        ),
        "problem": (
            "keeps going offline",
            "shows the wrong temperature",
            "ignores my schedule",
            "won't reconnect to Wi-Fi",
            "resets itself to 20°C every night",
            "freezes on the boot screen",
            "clicks on and off every few minutes",
        ),
        "duration": (
            "since Tuesday",
            "for about two weeks",
            "since the last update",
            "for a few days now",
            "since the start of the month",
        ),
        "praise": (
            "The setup took about five minutes",
            "Our gas bill dropped noticeably",
            "The app is finally fast",
            "Support replied within an hour",
            "The filters arrived two days early",
            "It has not dropped off the Wi-Fi once",
        ),
        "wish": (
            "a proper web dashboard",
            "per-room schedules",
            "Home Assistant integration",
            "a CSV export of the history",
            "a shared family account",
            "a cheaper yearly plan",
            "humidity alerts",
            "a holiday calendar import",
        ),
        "room": ("living room", "bedroom", "home office", "nursery", "basement", "kitchen"),
        "city": (
            "Leeds",
            "Portland",
            "Melbourne",
            "Toronto",
            "Dublin",
            "Minneapolis",
            "Auckland",
            "Glasgow",
        ),
        "phone": ("iPhone 13", "Pixel 7", "Galaxy S23", "iPhone SE", "OnePlus 11"),
        "weekday": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    },
    "zh": {
        "device": ("Dial 温控器", "Dial Mini 温控器"),
        "feature": ("离家模式", "定时计划", "节能报告", "地理围栏", "滤网提醒"),
        "problem": ("老是掉线", "温度显示不准", "不按计划运行", "连不上 Wi-Fi", "每天半夜自己重置"),
        "duration": ("一个星期", "好几天", "快两周"),
        "praise": ("电费明显少了", "安装只花了十分钟", "客服回复特别快", "滤网比预计早两天送到"),
        "wish": ("网页版控制台", "按房间单独设置的计划", "家庭共享账号", "导出 CSV 数据的功能"),
    },
    "ja": {
        "device": ("Dial", "Dial Mini", "サーモスタット"),
        "feature": (
            "外出モード",
            "スケジュール機能",
            "省エネレポート",
            "ジオフェンス",
            "フィルター通知",
        ),
        "problem": (
            "すぐにオフラインになります",
            "実際と違う温度を表示します",
            "スケジュール通りに動きません",
            "Wi-Fiにつながりません",
        ),
        "duration": ("一週間ほど", "数日間", "二週間近く"),
        "praise": (
            "設定がとても簡単でした",
            "電気代が目に見えて下がりました",
            "サポートの対応がとても早かったです",
        ),
        "wish": (
            "ウェブ版の管理画面",
            "部屋ごとのスケジュール",
            "家族で共有できるアカウント",
            "CSVでのデータ出力",
        ),
    },
    "es": {
        "device": ("Dial", "Dial Mini", "termostato"),
        "feature": (
            "el modo ausente",
            "la programación",
            "el informe de consumo",
            "la geolocalización",
            "el aviso de cambio de filtro",
        ),
        "problem": (
            "se desconecta cada dos por tres",
            "marca una temperatura que no es",
            "ignora la programación",
            "no se conecta al wifi",
            "se reinicia solo por la noche",
        ),
        "duration": ("una semana", "varios días", "casi dos semanas"),
        "praise": (
            "la factura del gas ha bajado bastante",
            "no he tenido ni un problema",
            "la app va rapidísima",
            "estoy encantado con los horarios",
        ),
        "wish": (
            "un panel web",
            "horarios por habitación",
            "una cuenta familiar compartida",
            "la opción de exportar los datos a CSV",
        ),
    },
    "de": {
        "device": ("Dial", "Dial Mini", "Thermostat"),
        "feature": (
            "den Abwesenheitsmodus",
            "den Zeitplan",
            "den Energiebericht",
            "das Geofencing",
            "die Filtererinnerung",
        ),
        "problem": (
            "verliert ständig die Verbindung",
            "zeigt eine falsche Temperatur an",
            "ignoriert den Zeitplan",
            "kommt nicht mehr ins WLAN",
            "setzt sich nachts von selbst zurück",
        ),
        "duration": ("eine Woche", "mehrere Tage", "fast zwei Wochen"),
        "praise": (
            "die Einrichtung war kinderleicht",
            "die Heizkosten sind spürbar gesunken",
            "der Support hat innerhalb einer Stunde geantwortet",
            "die App läuft endlich flüssig",
        ),
        "wish": (
            "ein Web-Dashboard",
            "Zeitpläne pro Raum",
            "ein gemeinsames Familienkonto",
            "einen CSV-Export",
        ),
    },
    "fr": {
        "device": ("Dial", "Dial Mini", "thermostat"),
        "feature": (
            "le mode absence",
            "la programmation",
            "le rapport de consommation",
            "le géorepérage",
            "le rappel de filtre",
        ),
        "problem": (
            "se déconnecte sans arrêt",
            "affiche une mauvaise température",
            "ignore la programmation",
            "n'arrive plus à se connecter au wifi",
            "se réinitialise tout seul la nuit",
        ),
        "duration": ("une semaine", "plusieurs jours", "presque deux semaines"),
        "praise": (
            "l'installation a été super simple",
            "ma facture de chauffage a nettement baissé",
            "le support m'a répondu en moins d'une heure",
            "l'appli est enfin fluide",
        ),
        "wish": (
            "un tableau de bord web",
            "une programmation par pièce",
            "un compte familial partagé",
            "un export CSV",
        ),
    },
    "pt": {
        "device": ("Dial", "Dial Mini", "termostato"),
        "feature": (
            "o modo ausente",
            "a programação",
            "o relatório de consumo",
            "a cerca virtual",
            "o lembrete do filtro",
        ),
        "problem": (
            "cai da rede toda hora",
            "mostra a temperatura errada",
            "ignora a programação",
            "não conecta no wi-fi",
            "reinicia sozinho de madrugada",
        ),
        "duration": ("uma semana", "vários dias", "quase duas semanas"),
        "praise": (
            "a conta de luz caiu bastante",
            "não tive nenhum problema",
            "o app está bem mais rápido",
            "a instalação foi muito fácil",
        ),
        "wish": (
            "um painel na web",
            "programação por cômodo",
            "uma conta familiar compartilhada",
            "exportação para CSV",
        ),
    },
}

_OPENERS: dict[str, tuple[str, ...]] = {
    "en": (
        "Hi all,",
        "Hey everyone,",
        "Hello!",
        "Long-time lurker, first post.",
        "Not sure this is the right section, but here goes.",
        "Quick question.",
        "Update:",
    ),
    "zh": ("大家好，", "求助！", "新人报到，"),
    "ja": ("こんにちは。", "初めて投稿します。", "質問です。"),
    "es": ("Hola a todos.", "Buenas.", "Primera vez que escribo por aquí."),
    "de": ("Hallo zusammen!", "Moin!", "Kurze Frage:"),
    "fr": ("Bonjour à tous !", "Salut !", "Première fois que je poste ici."),
    "pt": ("Oi, pessoal!", "Olá a todos.", "Primeira vez postando aqui."),
}

_CLOSERS: dict[str, tuple[str, ...]] = {
    "en": (
        "Thanks in advance!",
        "Any ideas?",
        "Cheers",
        "Appreciate any help.",
        "Thanks!",
        "Edit: fixed a typo.",
        "Would love to hear if others see the same.",
    ),
    "zh": ("谢谢！", "先谢谢各位了。", "有同样情况的吗？"),
    "ja": ("よろしくお願いします。", "同じ症状の方はいますか？", "ありがとうございます。"),
    "es": ("¡Gracias!", "¿Alguna idea?", "Un saludo."),
    "de": ("Danke im Voraus!", "Gruß", "Hat jemand eine Idee?"),
    "fr": ("Merci d'avance !", "Une idée ?", "Bonne journée."),
    "pt": ("Valeu!", "Alguma ideia?", "Obrigado desde já."),
}

_EMOJI = ("🙂", "😅", "🔥", "👍", "😡", "🙏", "❄️", "🤔", "🎉", "😤", "💸", "🏠", "🥶", "🙄")
_EMOJI_BY_CATEGORY: dict[str, tuple[str, ...]] = {
    "question": ("🤔", "🙏", "😅"),
    "complaint": ("😡", "😤", "💸", "🥶", "🙄"),
    "praise": ("🙂", "👍", "🎉", "🔥", "🏠"),
    "suggestion": ("🙏", "🙂", "👍"),
    "announcement": ("📣", "👀", "🔧"),
    "offtopic": ("😅", "❄️", "☕", "🥶"),
}
_ALL_EMOJI = (*_EMOJI, "📣", "👀", "🔧", "☕", "😄", "😊")
_HASHTAGS = ("#hearthly", "#smarthome", "#heating", "#homeautomation")
_NO_SPACE_LANGS = frozenset({"zh", "ja"})


def _url(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return f"https://community.hearthly.example/t/{rng.randint(1000, 99999)}"
    if kind == 1:
        return f"https://help.hearthly.example/articles/{rng.randint(100, 9999)}"
    if kind == 2:
        return "https://status.hearthly.example"
    return f"https://img.example.net/{rng.randint(10**6, 10**7 - 1):x}.png"


_DYNAMIC: dict[str, Callable[[random.Random], str]] = {
    "version": lambda r: f"4.{r.randint(8, 14)}.{r.randint(0, 4)}",
    "firmware": lambda r: f"{r.randint(2, 3)}.{r.randint(0, 9)}.{r.randint(0, 20)}",
    "temp": lambda r: str(r.randint(18, 23)),
    "days": lambda r: str(r.choice((10, 14, 20, 30, 45, 60, 90))),
    "hours": lambda r: str(r.randint(2, 12)),
    "wait": lambda r: str(r.randint(4, 12)),
    "order": lambda r: f"HL-{r.randint(100000, 999999)}",
    "price": lambda r: r.choice(("4.99", "5.99", "6.49", "7.99")),
    "percent": lambda r: str(r.randint(8, 35)),
    "months": lambda r: str(r.randint(3, 18)),
    "n": lambda r: str(r.randint(2, 6)),
    "url": _url,
    "thread": lambda r: f"https://community.hearthly.example/t/{r.randint(1000, 99999)}",
    "thread2": lambda r: f"https://community.hearthly.example/t/{r.randint(1000, 99999)}",
    "emoji": lambda r: r.choice(_EMOJI),
}

_FORMATTER = string.Formatter()


def _fill(
    rng: random.Random, template: str, lang: str, fixed: Mapping[str, str] | None = None
) -> str:
    """Fill `{slot}`s in template order, so the random draws are always the same."""
    values: dict[str, str] = dict(fixed or {})
    pools = _POOLS.get(lang, {})
    for _, name, _, _ in _FORMATTER.parse(template):
        if not name or name in values:
            continue
        if name in _DYNAMIC:
            values[name] = _DYNAMIC[name](rng)
        elif name in pools:
            values[name] = rng.choice(pools[name])
        else:
            values[name] = rng.choice(_POOLS["en"][name])
    return template.format(**values)


def _weighted(rng: random.Random, options: Sequence[tuple[str, int]]) -> str:
    names = [name for name, _ in options]
    weights = [weight for _, weight in options]
    return rng.choices(names, weights=weights, k=1)[0]


def _stars(n: int) -> str:
    return "★" * n + "☆" * (5 - n)


def _short_text(rng: random.Random, lang: str, source: str) -> str:
    category = _weighted(rng, _CATEGORY_WEIGHTS[source])
    templates = _TEMPLATES[lang]
    first = rng.choice(templates[category])
    paragraphs = [_fill(rng, first, lang)]
    follow_ups = _FOLLOW_UPS[category]
    if follow_ups and rng.random() < 0.2:
        follow = rng.choice(follow_ups)
        choices = [t for t in templates[follow] if t != first]
        paragraphs.append(_fill(rng, rng.choice(choices), lang))
    glue = "" if lang in _NO_SPACE_LANGS else " "
    body = ("\n\n" if rng.random() < 0.6 else glue).join(paragraphs)

    if source in ("forum", "support-ticket") and rng.random() < 0.35:
        opener = rng.choice(_OPENERS[lang])
        sep = "\n\n" if opener.endswith(",") or rng.random() < 0.5 else glue
        body = opener + sep + body
    if source != "app-review" and rng.random() < 0.3:
        sep = "\n\n" if rng.random() < 0.4 else glue
        body = body + sep + rng.choice(_CLOSERS[lang])
    if "{url}" not in first and rng.random() < 0.07:
        label = "Link" if lang == "en" else "🔗"
        body += f"\n\n{label}: {_url(rng)}"
    if rng.random() < (0.35 if source == "social" else 0.08):
        emoji = rng.choice(_EMOJI_BY_CATEGORY[category])
        if not any(e in body for e in _ALL_EMOJI):
            body += glue + emoji
    if source == "social" and rng.random() < 0.4:
        body += " " + " ".join(rng.sample(_HASHTAGS, rng.randint(1, 2)))
    if source == "app-review":
        if category == "complaint":
            rating = rng.randint(1, 2)
        elif category == "praise":
            rating = rng.randint(4, 5)
        else:
            rating = rng.randint(3, 4)
        body = f"{_stars(rating)} {body}"
    return body


# --------------------------------------------------------------------------------------------
# Long posts (English, multi-paragraph): bug reports, reviews, feature proposals
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Month:
    year: int
    month: int
    days: int

    def day(self, rng: random.Random) -> int:
        return rng.randint(1, self.days)

    def date(self, day: int) -> str:
        return f"{day} {_MONTH_NAMES[self.month]}"

    @property
    def name(self) -> str:
        return _MONTH_NAMES[self.month]


_REPORT_CONTEXT = (
    "Some context first. We live in a {house} in {city}. There's a {device} in the hallway, a "
    "Sense room sensor in the {room} and another one upstairs. Heating is a {heating}. The Wi-Fi "
    "comes from {router} in the next room, with one wall in between. Everything "
    "worked fine for months before this started.",
    "Setup: {house}, {heating}, one {device} and two Sense sensors (one in the {room}). Internet "
    "is fibre with {router}. The thermostat was installed by a professional about a year ago "
    "and I have not touched the wiring since. App is on {version}, firmware was whatever was "
    "current at the start of {month_name}.",
)
_REPORT_SYMPTOM = (
    "The problem: at random times, usually at night, the {device} {problem}. The app shows it as "
    "offline for anything between a few minutes and {hours} hours. When it comes back, the "
    "schedule has sometimes skipped a step, so we wake up to a cold house. It is not every night, "
    "but it is often enough that I no longer trust it.",
    "What happens: the {device} {problem}. There's no pattern I can see in the time of day. The "
    "display itself stays on and still shows a temperature, but the app says 'Not reachable' and "
    "nothing I change in the app arrives at the device until it recovers on its own, which can "
    "take {hours} hours.",
)
_REPORT_EVENTS = (
    "device went offline in the app, display still on",
    "schedule skipped the 06:30 step, house at 16°C when we got up",
    "rebooted the router, device came back after about ten minutes",
    "installed firmware {firmware} when the app offered it",
    "opened a support ticket, got the automated reply",
    "device offline again, this time for roughly {hours} hours",
    "support asked for a diagnostics export, sent it the same evening",
    "moved the router closer as a test, no change",
    "factory reset and set everything up from scratch",
    "two days without a single drop, thought it was fixed",
    "dropped again in the middle of the night according to the log",
    "support escalated the ticket to the engineering team",
)
_REPORT_TRIED = (
    "Power-cycled the {device}, taking it off the backplate for a full minute",
    "Rebooted the router and checked that the 2.4 GHz band is enabled",
    "Gave the thermostat a fixed IP address in the router",
    "Turned off band steering on the router",
    "Removed and re-added the device in the app",
    "Reinstalled the app on my {phone} and on my partner's phone",
    "Disabled geofencing in case it was fighting the schedule",
    "Checked the wiring against the installation guide (the C-wire is connected)",
    "Swapped the Sense sensor batteries for fresh ones",
    "Moved the router about two metres closer",
    "Did a full factory reset and rebuilt the schedule by hand",
    "Tried the beta firmware from the early access programme",
)
_REPORT_OBSERVATIONS = (
    "One thing I noticed: the drops seem to happen when the heating switches on. I don't know if "
    "that's a coincidence or if the relay causes some kind of interference, but in the log you "
    "can see the Wi-Fi link go down within a second of the call for heat.",
    "The Sense sensor in the {room} never drops, even though it's further from the router. It "
    "talks to the thermostat, not directly to the Wi-Fi, so I guess that points to the "
    "thermostat's own radio rather than coverage in general.",
    "Our neighbours have the same model and don't see this, but they're with a different internet "
    "provider. I've asked them for their firmware version so I can compare.",
    "I also tried leaving the app closed for a whole day, in case the app polling was somehow "
    "involved. No difference: the device still dropped twice that day.",
    "For what it's worth, the display always shows the right temperature during the drops. It's "
    "only the connection and, as a side effect, the schedule steps that come from the cloud.",
    "I read through the thread at {thread} and it sounds similar, but most people there have the "
    "Dial Mini, and the fix mentioned there (disabling IPv6) made no difference for me.",
    "The timing is frustrating because it's getting properly cold in {city} now. Waking up to "
    "16°C with a toddler in the house isn't great.",
    "Support has been polite but slow. Every reply asks me to do something I already listed in "
    "the ticket, which makes me think nobody reads the full text.",
)
_REPORT_UPDATES = (
    "still happening, twice last night.",
    "support replied and asked for my router model. Sent it.",
    "installed the firmware update that came out this week. Fingers crossed.",
    "a few people replied that they see the same thing, so at least I'm not alone.",
    "no drops for {n} days now. Not calling it fixed yet.",
    "a moderator merged the duplicate thread into this one, thanks.",
)
_REPORT_ASK = (
    "What I'd like to know: is this a known issue with {version}, and is there a fix on the way? "
    "If it's a hardware fault I'm happy to send the unit back, but I'd rather not go a week "
    "without heating control in {month_name}.",
    "So, two questions. Has anyone else seen this exact pattern, and did anything fix it for you? "
    "And to Hearthly staff, if you read this: can you confirm whether the diagnostics I sent on "
    "ticket {order} actually reached the engineers?",
)
_LOG_LINES: tuple[tuple[str, str, str], ...] = (
    ("WARN", "wifi", "reassoc failed rssi=-{rssi} reason=4"),
    ("INFO", "wifi", "link up ch={ch} rssi=-{rssi}"),
    ("INFO", "wifi", "dhcp lease renewed"),
    ("WARN", "wifi", "beacon loss count={n}"),
    ("ERROR", "wifi", "link down, retry in {n}0s"),
    ("WARN", "sched", "step skipped id={n} reason=offline"),
    ("INFO", "sched", "setpoint {temp}.0 applied"),
    ("INFO", "sched", "resume from local cache"),
    ("ERROR", "cloud", "mqtt disconnect code=7"),
    ("INFO", "cloud", "mqtt connected after {n} retries"),
    ("INFO", "cloud", "token refresh ok"),
    ("INFO", "hvac", "call for heat on"),
    ("INFO", "hvac", "call for heat off"),
    ("INFO", "hvac", "relay cycle count={cycles}"),
    ("INFO", "sensor", "sense-{n} battery={pct}%"),
    ("WARN", "sensor", "sense-{n} reading stale >{n}m"),
    ("INFO", "ota", "check: no update"),
)

_REVIEW_SECTIONS = (
    "I said I'd write this up once we'd had a full season with the system, so here it is. Short "
    "version: mostly happy, a few real annoyances, and I'd buy it again. Long version below, in "
    "case it helps anyone who is on the fence.",
    "Installation. The {device} replaced a twenty-year-old dial thermostat in the hallway. The app "
    "walked me through photographing the old wiring, told me which wire went where, and flagged "
    "that we had no C-wire. The included adapter solved that. All in all it took about forty "
    "minutes, most of which was me looking for the right screwdriver. The Sense sensors just "
    "stick on and pair in seconds.",
    "The app. It has improved a lot over the months. Early on it was slow to open and the "
    "schedule editor was fiddly on a small screen. Since {version} it opens instantly and the "
    "schedule editor is drag-and-drop. My one complaint is that settings are scattered: some "
    "things are under the device, some under the home, some under the account, and I still have "
    "to hunt for {feature}.",
    "Savings. This is the bit everyone asks about. Comparing the same months year on year, our "
    "gas use is down about {percent}%. Part of that is probably a mild autumn, and part is simply "
    "that we now have a real schedule instead of leaving the heating on all evening. The energy "
    "report makes that very visible, which on its own changed our habits.",
    "Hearthly Plus and the filter box. We pay ${price} a month. For that we get the detailed "
    "energy reports, unlimited history and the filter box delivery. The filters have arrived on "
    "time every month except once, and that time support sent a replacement without fuss. Is it "
    "worth it? For us, yes, mainly because I would never remember to change the filters myself.",
    "Support. I contacted them {n} times. Most were quick fixes, one took almost a week of back "
    "and forth about a billing mistake. Everyone was friendly, but the ticket system loses "
    "context between replies, so be ready to repeat yourself.",
    "Downsides. The display is too bright at night if the thermostat is anywhere near a bedroom. "
    "Geofencing occasionally thinks we're home when we're not, which wastes a bit of heat. And "
    "there's still no web dashboard, which is odd for a product that is so data-heavy. None of "
    "these are deal-breakers.",
)
_REVIEW_EXTRAS = (
    "Replies to a few questions from the comments: yes, it works with our heat pump, but you "
    "need to set the system type correctly during setup or the eco preset behaves oddly.",
    "Someone asked about privacy. You can turn off detailed usage sharing in the account "
    "settings; the reports still work, they're just computed on fewer data points.",
    "Another common question: does it work without the subscription? Yes. Schedules, remote "
    "control and basic history are free. Plus adds the long history, detailed reports and the "
    "filter delivery.",
    "On the Sense sensors: worth it if you have a room that is always colder or warmer than the "
    "hallway. We have one in the {room} and it made a noticeable difference.",
    "A tip if you're installing it yourself: take a photo of the old wiring before you touch "
    "anything, and label the wires with tape. The app asks for the photo anyway.",
    "Update ({date}): still going strong. The latest firmware added a night dimming option, so "
    "one of my complaints above is solved.",
    "Update ({date}): one sensor battery died after {months} months, earlier than I expected. "
    "The replacement is a standard coin cell, so no big deal.",
)

_PROPOSAL_SECTIONS = (
    "The problem. Right now there is no way to get {wish} in Hearthly. I keep coming back to "
    "this forum and seeing the same request in different words, so I thought I'd write up one "
    "proper proposal that people can vote on instead of ten short threads.",
    "Who this helps. Anyone with more than one room that behaves differently, anyone sharing a "
    "home with people on different schedules, and anyone who likes to look at their data outside "
    "the phone. Judging by the replies in older threads, that's a lot of us.",
    "Edge cases I can think of: what happens when two people edit at the same time (last write "
    "wins is fine by me, as long as the app shows who changed what), what happens around "
    "daylight saving changes, and what happens if a room has a sensor but no radiator valve.",
    "A rough mock-up: one screen with a row per room, the current temperature on the left, the "
    "next scheduled change in the middle and a small graph of the last 24 hours on the right. "
    "Tapping a row opens the existing room screen, so nothing else has to change.",
    "Related threads: {thread} and {thread2}.",
    "If you'd use this, please vote on the thread rather than replying '+1', so the team can see "
    "the numbers. And if you work at Hearthly and this is already on the roadmap, a short note "
    "would make a lot of people happy.",
)
_PROPOSAL_BEHAVIOUR = (
    "It should be available on the free plan, at least in a basic form",
    "Changes made in one place should show up everywhere within a few seconds",
    "It should keep working for local schedules when the cloud is unavailable",
    "It should respect the existing permissions for family members",
    "It should be possible to turn it off completely for people who don't want it",
    "Exported data should use plain formats (CSV or JSON), not screenshots",
)
_PROPOSAL_EXTRAS = (
    "Edit: several people mentioned accessibility. Good point: whatever the design, it needs to "
    "work with large text sizes and screen readers.",
    "Edit: to the person who said this is 'too niche': the original thread about it has more "
    "replies than any other feature request in the forum.",
    "Edit ({date}): a moderator confirmed the request has been passed on to the product team. No "
    "timeline, but it's something.",
    "A note on pricing: I'd be fine with this being a Plus feature if the basic version stays "
    "free. What I don't want is yet another subscription tier.",
    "For comparison, I used to run a home-made setup with a Raspberry Pi and a spreadsheet for "
    "this. It worked, but it was fragile, and I'd much rather the product did it properly.",
    "Someone asked why not just use the existing widget. The widget shows one room at a time and "
    "can't be edited, so it solves a different problem.",
)

_LONG_POOLS: dict[str, tuple[str, ...]] = {
    "house": (
        "three-bedroom terraced house",
        "1970s bungalow",
        "top-floor flat",
        "detached house with a loft conversion",
        "small two-bedroom apartment",
    ),
    "heating": (
        "gas combi boiler",
        "air-source heat pump",
        "oil boiler with radiators",
        "mix of underfloor heating downstairs and radiators upstairs",
    ),
    "router": (
        "an ISP-supplied router",
        "a mesh system with three nodes",
        "an old router I keep meaning to replace",
    ),
    "problem": (
        "keeps going offline",
        "drops off the Wi-Fi every night",
        "won't stay connected",
        "loses its cloud connection",
    ),
    "wish": (
        "a proper web dashboard",
        "per-room schedules",
        "a multi-room overview screen",
        "a shared family schedule",
    ),
}


def _fill_long(rng: random.Random, template: str, month: _Month, fixed: dict[str, str]) -> str:
    """Fill a long-post template; `fixed` keeps slots (device, version, ...) stable per post."""
    values = {"month_name": month.name, **fixed}
    for _, name, _, _ in _FORMATTER.parse(template):
        if name == "date" and "date" not in values:
            values["date"] = month.date(month.day(rng))
        elif name in _LONG_POOLS and name not in values:
            values[name] = rng.choice(_LONG_POOLS[name])
    return _fill(rng, template, "en", values)


def _post_facts(rng: random.Random) -> dict[str, str]:
    """The details one author repeats throughout a long post."""
    return {
        "device": rng.choice(_POOLS["en"]["device"]),
        "version": _DYNAMIC["version"](rng),
        "firmware": _DYNAMIC["firmware"](rng),
        "room": rng.choice(_POOLS["en"]["room"]),
        "city": rng.choice(_POOLS["en"]["city"]),
        "phone": rng.choice(_POOLS["en"]["phone"]),
        "problem": rng.choice(_LONG_POOLS["problem"]),
        "wish": rng.choice(_LONG_POOLS["wish"]),
        "months": _DYNAMIC["months"](rng),
    }


def _log_block(rng: random.Random, month: _Month, facts: Mapping[str, str]) -> str:
    day = month.day(rng)
    seconds = rng.randint(0, 20 * 3600)
    lines = []
    for _ in range(rng.randint(5, 14)):
        seconds += rng.randint(1, 900)
        hh, rest = divmod(seconds, 3600)
        mm, ss = divmod(rest, 60)
        level, component, message = rng.choice(_LOG_LINES)
        message = message.format(
            rssi=rng.randint(55, 88),
            ch=rng.choice((1, 6, 11)),
            n=rng.randint(1, 9),
            temp=rng.randint(16, 22),
            cycles=rng.randint(2000, 40000),
            pct=rng.randint(5, 100),
        )
        stamp = f"{month.year:04d}-{month.month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z"
        lines.append(f"{stamp} {level:<5} {component}: {message}")
    intro = rng.choice(
        (
            f"Excerpt from the diagnostics export (firmware {facts['firmware']}):",
            f"Another chunk of the log, from {month.date(day)}:",
            "Log lines around one of the drops (times are UTC):",
        )
    )
    return intro + "\n\n" + "\n".join(lines)


def _bullets(rng: random.Random, items: Sequence[str], low: int, high: int) -> list[str]:
    picked = sorted(rng.sample(range(len(items)), rng.randint(low, min(high, len(items)))))
    return [items[i] for i in picked]


def _report_sections(rng: random.Random, month: _Month) -> tuple[list[str], list[str], str]:
    facts = _post_facts(rng)
    title = _fill_long(
        rng,
        rng.choice(
            (
                "Long write-up: {device} {problem} since {version} (what I've tried so far)",
                "[Detailed report] {device} {problem}, {month_name} edition",
                "{device} {problem}: full timeline, logs and everything I tried",
            )
        ),
        month,
        facts,
    )
    title = title[0].upper() + title[1:]
    events = _bullets(rng, _REPORT_EVENTS, 4, 9)
    moments = sorted((month.day(rng), rng.randint(0, 23), rng.randint(0, 59)) for _ in events)
    timeline = "Timeline so far:\n" + "\n".join(
        f"- {month.date(d)}, {hh:02d}:{mm:02d}: " + _fill_long(rng, e, month, facts)
        for (d, hh, mm), e in zip(moments, events, strict=True)
    )
    tried = "Things I have already tried:\n" + "\n".join(
        "- " + _fill_long(rng, t, month, facts) for t in _bullets(rng, _REPORT_TRIED, 4, 9)
    )
    sections = [
        title,
        _fill_long(rng, rng.choice(_REPORT_CONTEXT), month, facts),
        _fill_long(rng, rng.choice(_REPORT_SYMPTOM), month, facts),
        timeline,
        tried,
        _log_block(rng, month, facts),
    ]
    observations = [
        _fill_long(rng, o, month, facts) for o in _bullets(rng, _REPORT_OBSERVATIONS, 2, 8)
    ]
    rng.shuffle(observations)
    sections.append(observations.pop())
    updates = _bullets(rng, _REPORT_UPDATES, 2, len(_REPORT_UPDATES))
    update_days = sorted(month.day(rng) for _ in updates)
    extras = observations[:2] + [_log_block(rng, month, facts)] + observations[2:]
    extras += [_log_block(rng, month, facts) for _ in range(2)]
    extras += [
        f"Update ({month.date(d)}): " + _fill_long(rng, u, month, facts)
        for d, u in zip(update_days, updates, strict=True)
    ]
    ending = (
        _fill_long(rng, rng.choice(_REPORT_ASK), month, facts)
        + "\n\n"
        + rng.choice(
            ("Thanks for reading this far.", "Sorry for the wall of text, and thanks.", "Cheers")
        )
    )
    return sections, extras, ending


def _review_sections(rng: random.Random, month: _Month) -> tuple[list[str], list[str], str]:
    facts = _post_facts(rng)
    rating = rng.randint(3, 5)
    facts["stars"] = _stars(rating)
    title = _fill_long(
        rng,
        rng.choice(
            (
                "{stars} Long review: {months} months with the {device} and Hearthly Plus",
                "{stars} Honest review after {months} months (long, sorry)",
            )
        ),
        month,
        facts,
    )
    sections = [title] + [_fill_long(rng, s, month, facts) for s in _REVIEW_SECTIONS]
    extras = [_fill_long(rng, e, month, facts) for e in _REVIEW_EXTRAS]
    rng.shuffle(extras)
    ending = (
        f"Verdict: {rating} out of 5. It does the core job, heating the house when we need it and "
        "not when we don't, really well. The rest is polish, and the polish is getting better "
        "with every update."
    )
    return sections, extras, ending


def _proposal_sections(rng: random.Random, month: _Month) -> tuple[list[str], list[str], str]:
    facts = _post_facts(rng)
    title = f"Feature proposal: {facts['wish']} (with a rough design)"
    behaviour = "Proposed behaviour:\n" + "\n".join(
        "- " + b for b in _bullets(rng, _PROPOSAL_BEHAVIOUR, 3, 6)
    )
    body = [_fill_long(rng, s, month, facts) for s in _PROPOSAL_SECTIONS]
    sections = [title, body[0], body[1], behaviour, body[2], body[3], body[4]]
    extras = [_fill_long(rng, e, month, facts) for e in _PROPOSAL_EXTRAS]
    rng.shuffle(extras)
    return sections, extras, body[5]


_LONG_KINDS: tuple[
    tuple[
        str,
        int,
        tuple[str, ...],
        Callable[[random.Random, _Month], tuple[list[str], list[str], str]],
    ],
    ...,
] = (
    ("report", 5, ("forum", "support-ticket"), _report_sections),
    ("review", 3, ("app-review", "forum"), _review_sections),
    ("proposal", 2, ("forum",), _proposal_sections),
)


def _long_post(rng: random.Random, month: _Month) -> tuple[str, str]:
    """Return (text, source) for a multi-paragraph post of roughly 1,600-6,000 characters."""
    kind = _weighted(rng, [(name, weight) for name, weight, _, _ in _LONG_KINDS])
    _, _, sources, build = next(k for k in _LONG_KINDS if k[0] == kind)
    source = rng.choice(sources)
    sections, extras, ending = build(rng, month)
    target = rng.randint(1600, MAX_LONG_CHARS - 200)
    text = "\n\n".join(sections)
    room = MAX_LONG_CHARS - len(ending) - 2
    for extra in extras:
        if len(text) + len(ending) >= target or len(text) + 2 + len(extra) > room:
            break
        text += "\n\n" + extra
    return text + "\n\n" + ending, source


# --------------------------------------------------------------------------------------------
# Month, author, timestamp
# --------------------------------------------------------------------------------------------


def _parse_month(month: str) -> _Month:
    match = _MONTH_RE.fullmatch(month) if isinstance(month, str) else None
    if match is None or not 1 <= int(match.group(2)) <= 12 or int(match.group(1)) < 1:
        raise ValueError(f"month must look like 2026-10 (YYYY-MM, month 01-12), got {month!r}")
    year, number = int(match.group(1)), int(match.group(2))
    return _Month(year, number, calendar.monthrange(year, number)[1])


_HANDLE_NAMES: dict[str, tuple[str, ...]] = {
    "en": (
        "sam",
        "jess",
        "mike",
        "priya",
        "tom",
        "hannah",
        "dave",
        "olivia",
        "raj",
        "chloe",
        "ben",
        "nina",
        "grant",
        "maya",
        "leo",
        "aisha",
    ),
    "zh": ("xiaolin", "weiwei", "chenjie", "liyang", "zhangmin", "haoran"),
    "ja": ("yuki", "haruto", "mika", "kenji", "sakura", "taro"),
    "es": ("lucia", "javi", "marta", "pablo", "carmen", "diego"),
    "de": ("lukas", "anna", "jonas", "katrin", "felix", "sabine"),
    "fr": ("camille", "julien", "manon", "theo", "claire", "hugo"),
    "pt": ("joao", "ana", "rafael", "beatriz", "lucas", "mariana"),
}
_HANDLE_NOUNS = (
    "home",
    "heat",
    "cozy",
    "coffee",
    "north",
    "garden",
    "retro",
    "pixel",
    "bike",
    "owl",
    "maker",
    "fox",
    "tea",
    "cat",
)


def _author(rng: random.Random, lang: str) -> str:
    first = rng.choice(_HANDLE_NAMES[lang])
    noun = rng.choice(_HANDLE_NOUNS)
    style = rng.randrange(5)
    if style == 0:
        return f"{first}{rng.randint(1, 99)}"
    if style == 1:
        return f"{first}_{noun}"
    if style == 2:
        return f"{noun}.{first}"
    if style == 3:
        return f"{first}.{rng.choice(string.ascii_lowercase)}"
    return f"{noun}{rng.choice(_HANDLE_NOUNS)}{rng.randint(1, 999)}"


def _timestamp(rng: random.Random, month: _Month) -> str:
    offset = rng.randrange(month.days * 86400)
    day, rest = divmod(offset, 86400)
    hh, rest = divmod(rest, 3600)
    mm, ss = divmod(rest, 60)
    return f"{month.year:04d}-{month.month:02d}-{day + 1:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z"


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def generate_posts(month: str, count: int, seed: int) -> list[dict[str, str]]:
    """Return `count` posts dated inside `month` ("YYYY-MM"); same arguments, same posts."""
    parsed = _parse_month(month)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a whole number of at least 1, got {count!r}")
    rng = random.Random(seed)
    posts: list[dict[str, str]] = []
    for i in range(1, count + 1):
        if rng.random() < LONG_SHARE:
            lang = "en"
            text, source = _long_post(rng, parsed)
        else:
            lang = _weighted(rng, _LANG_WEIGHTS)
            source = _weighted(rng, _SOURCE_WEIGHTS)
            text = _short_text(rng, lang, source)
        posts.append(
            {
                "id": f"p-{month}-{i:05d}",
                "text": text,
                "author": _author(rng, lang),
                "created_at": _timestamp(rng, parsed),
                "lang": lang,
                "source": source,
            }
        )
    return posts


def write_posts(path: Path, posts: list[dict[str, str]]) -> None:
    """Write `posts` as UTF-8 JSON Lines (one object per line), creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        for post in posts:
            handle.write(json.dumps(post, ensure_ascii=False) + "\n")
